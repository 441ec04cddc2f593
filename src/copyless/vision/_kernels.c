/* copyless.vision._kernels: fused image preprocessing and DB text-map labelling.
 *
 * resample(src, dst, src_box, rect, fill, bgr, bf16=False)
 *     One pass from a packed uint8 RGB/RGBX image to a destination image view of any strides
 *     (uint8, float32 or float16, 3 or 4 channels; with bf16, a 2-byte view written as
 *     bfloat16, rounded to nearest even): antialiased bilinear resampling (PIL's
 *     convolution scheme: a triangle filter whose support grows with the downscale factor,
 *     so downscaling averages every source pixel), crop (src_box), placement (rect),
 *     padding with `fill` outside rect, RGB/BGR channel order, the 4th channel zeroed, and
 *     the uint8/float32 conversion. Vertical pass first into one float row of the needed
 *     source columns, then the horizontal pass writes straight into dst: no full-size
 *     temporary. Runs without the GIL.
 *
 * components(prob, threshold)
 *     8-connected components of prob > threshold in a 2-D float32 map of any strides
 *     (union-find, two passes). Returns [(x0, y0, x1, y1, count, sum)], x1/y1 exclusive.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- resampling -------------------------------------------------------------------- */

typedef struct {
    int *start; /* first source index of each output sample */
    int *count; /* taps of each output sample */
    float *weights; /* ksize weights per output sample, normalised */
    int ksize;
} Coeffs;

static double triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static void coeffs_free(Coeffs *c) {
    free(c->start);
    free(c->count);
    free(c->weights);
    c->start = c->count = NULL;
    c->weights = NULL;
}

/* Taps mapping [in0, in1) of a source axis of in_size samples onto out_size samples. */
static int coeffs_init(Coeffs *c, int in_size, double in0, double in1, int out_size) {
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->start = malloc(sizeof(int) * (size_t)out_size);
    c->count = malloc(sizeof(int) * (size_t)out_size);
    c->weights = calloc((size_t)out_size * (size_t)c->ksize, sizeof(float));
    if (!c->start || !c->count || !c->weights) {
        coeffs_free(c);
        return -1;
    }
    for (int o = 0; o < out_size; o++) {
        double center = in0 + (o + 0.5) * scale;
        int lo = (int)floor(center - support + 0.5);
        int hi = (int)floor(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        if (hi <= lo) { /* degenerate box at an edge: nearest sample */
            lo = (int)floor(center);
            if (lo >= in_size) lo = in_size - 1;
            if (lo < 0) lo = 0;
            hi = lo + 1;
        }
        /* zero-weight taps at either end (e.g. every other tap at scale 1) are dropped */
        while (hi - lo > 1 && triangle((lo - center + 0.5) / filterscale) == 0.0) lo++;
        while (hi - lo > 1 && triangle((hi - 1 - center + 0.5) / filterscale) == 0.0) hi--;
        float *w = c->weights + (size_t)o * (size_t)c->ksize;
        double total = 0.0;
        for (int i = 0; i < hi - lo; i++) total += triangle((i + lo - center + 0.5) / filterscale);
        for (int i = 0; i < hi - lo; i++) {
            double t = triangle((i + lo - center + 0.5) / filterscale);
            w[i] = (float)(total > 0.0 ? t / total : 1.0 / (hi - lo));
        }
        c->start[o] = lo;
        c->count[o] = hi - lo;
    }
    return 0;
}

/* The destination's element type. */
typedef enum { KIND_U8, KIND_F32, KIND_F16, KIND_BF16 } Kind;

/* float -> IEEE half, round to nearest even (finite pixel values; inf/NaN kept). */
static inline uint16_t to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, bexp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (bexp == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    const int32_t exp = (int32_t)bexp - 127 + 15;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) { /* subnormal half (or zero) */
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry rounds the exponent up */
    return (uint16_t)h;
}

/* float -> bfloat16 (the upper half of the float), round to nearest even. */
static inline uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

typedef struct {
    const uint8_t *src;
    Py_ssize_t src_row; /* bytes between source rows */
    int src_w, src_h, src_px; /* source pixel stride: 3 or 4 bytes */
    char *dst;
    Py_ssize_t dst_sy, dst_sx, dst_sc; /* byte strides of the (H, W, C) destination */
    int dst_w, dst_h, dst_c, dst_kind; /* a Kind */
    int ox, oy, ow, oh; /* where the resampled image lands in dst */
    float fill;
    int bgr;
} Job;

static inline uint8_t to_u8(float v) { return (uint8_t)(int32_t)(v + 0.5f); }

/* Writes pixels [x0, x1) of dst row y from v (RGB float triples of those pixels, 0..255).
 * u8 is scratch of 3 * (x1 - x0) bytes. The two packed layouts have loops the compiler
 * vectorizes (the float -> byte conversion runs over contiguous floats); others go generic. */
static void store_row(const Job *j, int y, const float *v, int x0, int x1, uint8_t *u8) {
    char *p = j->dst + y * j->dst_sy + x0 * j->dst_sx;
    const int r = j->bgr ? 2 : 0, b = 2 - r, n = x1 - x0;
    const int aligned = ((uintptr_t)p % 4 == 0) && j->dst_sc % 4 == 0;
    if (j->dst_kind == KIND_U8 && j->dst_c == 4 && j->dst_sc == 1 && j->dst_sx == 4) {
        for (int i = 0; i < 3 * n; i++) u8[i] = to_u8(v[i]);
        for (int x = 0; x < n; x++) {
            const uint8_t *t = u8 + 3 * x;
            uint32_t px = (uint32_t)t[r] | (uint32_t)t[1] << 8 | (uint32_t)t[b] << 16;
            memcpy(p + 4 * x, &px, 4); /* little-endian bytes: R G B 0 */
        }
    } else if (j->dst_kind == KIND_F32 && j->dst_c == 3 && j->dst_sx == 4 && aligned) {
        float *pr = (float *)(p + r * j->dst_sc), *pg = (float *)(p + j->dst_sc);
        float *pb = (float *)(p + b * j->dst_sc);
        for (int x = 0; x < n; x++, v += 3) { /* min: 255 + rounding error is 255 */
            pr[x] = v[0] < 255.0f ? v[0] : 255.0f;
            pg[x] = v[1] < 255.0f ? v[1] : 255.0f;
            pb[x] = v[2] < 255.0f ? v[2] : 255.0f;
        }
    } else {
        for (int x = 0; x < n; x++, v += 3) {
            char *q = p + x * j->dst_sx;
            float px[4] = {v[r], v[1], v[b], 0.0f};
            for (int c = 0; c < 3; c++) px[c] = px[c] < 255.0f ? px[c] : 255.0f;
            for (int c = 0; c < j->dst_c; c++) {
                char *e = q + c * j->dst_sc;
                uint16_t h;
                switch (j->dst_kind) {
                case KIND_F32: memcpy(e, &px[c], sizeof(float)); break;
                case KIND_F16: h = to_f16(px[c]); memcpy(e, &h, 2); break;
                case KIND_BF16: h = to_bf16(px[c]); memcpy(e, &h, 2); break;
                default: *e = (char)to_u8(px[c]); break;
                }
            }
        }
    }
}

/* A fill row: converted once (row `*first`), then copied byte for byte where rows are dense. */
static void fill_row(const Job *j, int y, const float *fill, int x0, int x1, uint8_t *u8,
                     int *first) {
    const int packed_u8 = j->dst_kind == KIND_U8 && j->dst_c == 4 && j->dst_sc == 1 && j->dst_sx == 4;
    const int planar_f32 = j->dst_kind == KIND_F32 && j->dst_c == 3 && j->dst_sx == 4;
    if (x0 == 0 && x1 == j->dst_w && *first >= 0 && (packed_u8 || planar_f32)) {
        const char *src = j->dst + *first * j->dst_sy;
        char *dst = j->dst + y * j->dst_sy;
        if (packed_u8) {
            memcpy(dst, src, (size_t)j->dst_w * 4);
        } else {
            for (int c = 0; c < 3; c++)
                memcpy(dst + c * j->dst_sc, src + c * j->dst_sc, (size_t)j->dst_w * 4);
        }
        return;
    }
    store_row(j, y, fill, x0, x1, u8);
    if (x0 == 0 && x1 == j->dst_w && *first < 0) *first = y;
}

/* One output row: taps of source columns in `row` (px floats per pixel) -> out RGB triples.
 * Every sample runs `taps` taps (the widest one; the others' extra weights are 0 and `row`
 * is zero-padded past its end) so the loop is uniform. Triangle weights are >= 0 and sum
 * to 1, so results stay within the 0..255 of the source: no clamping. */
static inline void hpass(const Coeffs *cx, int col0, const float *row, float *out, int ow,
                         int taps, int px) {
    for (int o = 0; o < ow; o++, out += 3) {
        const float *wx = cx->weights + (size_t)o * (size_t)cx->ksize;
        const float *r = row + (size_t)(cx->start[o] - col0) * (size_t)px;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int k = 0; k < taps; k++, r += px) {
            a0 += wx[k] * r[0];
            a1 += wx[k] * r[1];
            a2 += wx[k] * r[2];
        }
        out[0] = a0;
        out[1] = a1;
        out[2] = a2;
    }
}

static int run_resample(const Job *j, double bx0, double by0, double bx1, double by1) {
    Coeffs cx = {0}, cy = {0};
    float *row = NULL, *out = NULL, *fill = NULL;
    uint8_t *u8 = NULL;
    int rc = -1;
    if (coeffs_init(&cx, j->src_w, bx0, bx1, j->ow) < 0) return -1;
    if (coeffs_init(&cy, j->src_h, by0, by1, j->oh) < 0) goto done;
    int col0 = cx.start[0], col1 = 0, taps = 1;
    for (int o = 0; o < j->ow; o++) {
        if (cx.count[o] > taps) taps = cx.count[o];
        if (cx.start[o] < col0) col0 = cx.start[o];
        if (cx.start[o] + cx.count[o] > col1) col1 = cx.start[o] + cx.count[o];
    }
    const int px = j->src_px;
    const size_t span = (size_t)(col1 - col0) * (size_t)px, line = (size_t)j->dst_w * 3 + 4;
    row = calloc(span + (size_t)(taps * px), sizeof(float));
    out = malloc(sizeof(float) * line);
    fill = malloc(sizeof(float) * line);
    u8 = malloc(line);
    if (!row || !out || !fill || !u8) goto done;
    for (size_t i = 0; i < line; i++) fill[i] = j->fill;
    int first = -1;
    for (int y = 0; y < j->dst_h; y++) {
        if (y < j->oy || y >= j->oy + j->oh) {
            fill_row(j, y, fill, 0, j->dst_w, u8, &first);
            continue;
        }
        if (j->ox > 0) fill_row(j, y, fill, 0, j->ox, u8, &first);
        if (j->ox + j->ow < j->dst_w) fill_row(j, y, fill, j->ox + j->ow, j->dst_w, u8, &first);
        const int oy = y - j->oy;
        const float *wy = cy.weights + (size_t)oy * (size_t)cy.ksize;
        const uint8_t *s = j->src + cy.start[oy] * j->src_row + (size_t)col0 * (size_t)px;
        for (size_t i = 0; i < span; i++) row[i] = wy[0] * (float)s[i];
        for (int k = 1; k < cy.count[oy]; k++) {
            const uint8_t *sk = s + k * j->src_row;
            const float w = wy[k];
            for (size_t i = 0; i < span; i++) row[i] += w * (float)sk[i];
        }
        if (px == 3) hpass(&cx, col0, row, out, j->ow, taps, 3);
        else hpass(&cx, col0, row, out, j->ow, taps, 4);
        store_row(j, y, out, j->ox, j->ox + j->ow, u8);
    }
    rc = 0;
done:
    free(row);
    free(out);
    free(fill);
    free(u8);
    coeffs_free(&cx);
    coeffs_free(&cy);
    return rc;
}

/* A float32 item format: numpy exports "f", or "=f" / "<f" for an unaligned array (reads
 * and writes of those go through memcpy, see PROB and store_row). */
static int is_f32(const Py_buffer *b) {
    if (b->itemsize != 4 || b->format == NULL) return 0;
    const char *f = b->format;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (*f == '<') f++;
#endif
    if (*f == '=' || *f == '@') f++;
    return strcmp(f, "f") == 0;
}

static int check_src(const Py_buffer *b) {
    if (b->ndim != 3 || (b->shape[2] != 3 && b->shape[2] != 4) || b->itemsize != 1 ||
        (b->format && strcmp(b->format, "B") != 0)) {
        PyErr_SetString(PyExc_ValueError, "source must be a uint8 (H, W, 3|4) image");
        return -1;
    }
    if (b->strides[2] != 1 || b->strides[1] != b->shape[2] || b->strides[0] < b->shape[1] * b->shape[2]) {
        PyErr_SetString(PyExc_ValueError, "source rows must hold packed pixels (row stride > 0)");
        return -1;
    }
    if (b->shape[0] < 1 || b->shape[1] < 1 || b->shape[0] > INT32_MAX || b->shape[1] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "source image is empty or too large");
        return -1;
    }
    return 0;
}

/* A float16 item format: "e", with an optional byte-order prefix as for is_f32. */
static int is_f16(const Py_buffer *b) {
    if (b->itemsize != 2 || b->format == NULL) return 0;
    const char *f = b->format;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (*f == '<') f++;
#endif
    if (*f == '=' || *f == '@') f++;
    return strcmp(f, "e") == 0;
}

static int check_dst(const Py_buffer *b, int bf16, int *kind) {
    if (b->ndim != 3 || (b->shape[2] != 3 && b->shape[2] != 4) || b->shape[0] < 1 ||
        b->shape[1] < 1 || b->shape[0] > INT32_MAX || b->shape[1] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "destination must be an (H, W, 3|4) view");
        return -1;
    }
    if (bf16) {
        if (b->itemsize != 2) {
            PyErr_SetString(PyExc_ValueError, "a bf16 destination must be a 2-byte view");
            return -1;
        }
        *kind = KIND_BF16;
    } else if (is_f32(b)) {
        *kind = KIND_F32;
    } else if (is_f16(b)) {
        *kind = KIND_F16;
    } else if (b->itemsize == 1 && (!b->format || strcmp(b->format, "B") == 0)) {
        *kind = KIND_U8;
    } else {
        PyErr_SetString(PyExc_ValueError, "destination must be uint8, float32 or float16");
        return -1;
    }
    return 0;
}

/* resample(src, dst, src_box, rect, fill, bgr, bf16). Every argument is checked here, whatever
 * the caller: check_src (uint8 (H, W, 3|4), packed pixels, rows of positive stride, dims
 * <= INT32_MAX), check_dst ((H, W, 3|4) uint8, float32, float16, or a 2-byte view written
 * as bf16, of any strides, dims <= INT32_MAX),
 * rect inside dst without an overflowing sum, the box inside the source (NaN fails), fill
 * in 0..255. Python (preprocess.classify_preprocess / letterbox, through
 * preprocess._source, which copies a non-packed image, and formats.image_view, which
 * checks the destination's format, size, batch index and writability) only calls it
 * with arguments that pass; the checks are for everything else. */
static PyObject *resample(PyObject *self, PyObject *args) {
    PyObject *src_obj, *dst_obj;
    double bx0, by0, bx1, by1, fill;
    Py_ssize_t ox, oy, ow, oh;
    int bgr, bf16 = 0;
    if (!PyArg_ParseTuple(args, "OO(dddd)(nnnn)dp|p", &src_obj, &dst_obj, &bx0, &by0, &bx1, &by1,
                          &ox, &oy, &ow, &oh, &fill, &bgr, &bf16))
        return NULL;
    Py_buffer sb, db;
    if (PyObject_GetBuffer(src_obj, &sb, PyBUF_RECORDS_RO) < 0) return NULL;
    if (PyObject_GetBuffer(dst_obj, &db, PyBUF_RECORDS) < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    int kind = KIND_U8, rc = -1;
    if (check_src(&sb) < 0 || check_dst(&db, bf16, &kind) < 0) goto done;
    Job j = {
        .src = sb.buf, .src_row = sb.strides[0], .src_w = (int)sb.shape[1],
        .src_h = (int)sb.shape[0], .src_px = (int)sb.shape[2], .dst = db.buf,
        .dst_sy = db.strides[0], .dst_sx = db.strides[1], .dst_sc = db.strides[2],
        .dst_w = (int)db.shape[1], .dst_h = (int)db.shape[0], .dst_c = (int)db.shape[2],
        .dst_kind = kind, .ox = (int)ox, .oy = (int)oy, .ow = (int)ow, .oh = (int)oh,
        .fill = (float)fill, .bgr = bgr,
    };
    /* No sum that can overflow: ox + ow with ox near PY_SSIZE_T_MAX wrapped negative and
     * passed (found by fuzz_vision's RESAMPLE mode under UBSan). */
    if (ow < 1 || oh < 1 || ox < 0 || oy < 0 || ow > j.dst_w || oh > j.dst_h ||
        ox > j.dst_w - ow || oy > j.dst_h - oh) {
        PyErr_SetString(PyExc_ValueError, "placement rect outside the destination");
        goto done;
    }
    if (!(bx0 >= 0.0 && by0 >= 0.0 && bx1 > bx0 && by1 > by0 && bx1 <= j.src_w + 1e-6 &&
          by1 <= j.src_h + 1e-6)) {
        PyErr_SetString(PyExc_ValueError, "source box outside the source image");
        goto done;
    }
    if (!(fill >= 0.0 && fill <= 255.0)) { /* NaN too: store_row would write 255 */
        PyErr_SetString(PyExc_ValueError, "fill must be a pixel value in 0..255");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = run_resample(&j, bx0, by0, bx1, by1);
    Py_END_ALLOW_THREADS
    if (rc < 0) PyErr_NoMemory();
done:
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- connected components ---------------------------------------------------------- */

typedef struct {
    int x0, y0, x1, y1;
    Py_ssize_t count;
    double sum;
} Comp;

static int32_t uf_find(int32_t *parent, int32_t a) {
    while (parent[a] != a) {
        parent[a] = parent[parent[a]];
        a = parent[a];
    }
    return a;
}

static void uf_union(int32_t *parent, int32_t a, int32_t b) {
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a < b) parent[b] = a;
    else if (b < a) parent[a] = b;
}

/* memcpy: the map may be an unaligned float32 view (a raw byte buffer at an odd offset). */
static inline float prob_at(const char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
#define PROB(y, x) prob_at(base + (y) * sy + (x) * sx)

/* Labels prob > thr; fills *out with n components. Returns n, or -1 on allocation failure. */
static Py_ssize_t label(const char *base, Py_ssize_t sy, Py_ssize_t sx, int h, int w, float thr,
                        Comp **out) {
    int32_t *lab = calloc((size_t)h * (size_t)w, sizeof(int32_t));
    size_t cap = 1024;
    int32_t n = 0;
    int32_t *parent = malloc(sizeof(int32_t) * cap);
    if (!lab || !parent) goto fail;
    parent[0] = 0;
    for (int y = 0; y < h; y++) {
        int32_t *lr = lab + (size_t)y * (size_t)w, *up = y ? lr - w : NULL;
        for (int x = 0; x < w; x++) {
            if (!(PROB(y, x) > thr)) continue;
            int32_t nb[4] = {x ? lr[x - 1] : 0, up && x ? up[x - 1] : 0, up ? up[x] : 0,
                             up && x + 1 < w ? up[x + 1] : 0};
            int32_t l = 0;
            for (int k = 0; k < 4; k++) {
                if (!nb[k]) continue;
                if (!l) l = nb[k];
                else uf_union(parent, l, nb[k]);
            }
            if (!l) {
                if ((size_t)(n + 2) > cap) {
                    int32_t *grown = realloc(parent, sizeof(int32_t) * cap * 2);
                    if (!grown) goto fail;
                    parent = grown;
                    cap *= 2;
                }
                l = ++n;
                parent[l] = l;
            }
            lr[x] = l;
        }
    }
    /* compact ids: root label -> 1..m, reusing parent[] once every label points at a root */
    int32_t *compact = calloc((size_t)n + 1, sizeof(int32_t));
    if (!compact) goto fail;
    int32_t m = 0;
    for (int32_t l = 1; l <= n; l++) {
        int32_t r = uf_find(parent, l);
        if (!compact[r]) compact[r] = ++m;
        compact[l] = compact[r];
    }
    Comp *comps = malloc(sizeof(Comp) * ((size_t)m + 1));
    if (!comps) {
        free(compact);
        goto fail;
    }
    for (int32_t c = 0; c < m; c++) comps[c] = (Comp){w, h, -1, -1, 0, 0.0};
    for (int y = 0; y < h; y++) {
        const int32_t *lr = lab + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            if (!lr[x]) continue;
            Comp *c = comps + compact[lr[x]] - 1;
            if (x < c->x0) c->x0 = x;
            if (y < c->y0) c->y0 = y;
            if (x > c->x1) c->x1 = x;
            if (y > c->y1) c->y1 = y;
            c->count++;
            c->sum += PROB(y, x);
        }
    }
    free(compact);
    free(lab);
    free(parent);
    *out = comps;
    return m;
fail:
    free(lab);
    free(parent);
    return -1;
}

/* components(prob, threshold). Checked here: a 2-D float32 buffer ("f", or "=f"/"<f" for
 * an unaligned view: PROB reads through memcpy), dims <= INT32_MAX, any strides. Python
 * (postprocess.text_boxes via _plane) passes a [H, W] float32 plane, converting other
 * float types first. Any threshold works (NaN selects nothing). */
static PyObject *components(PyObject *self, PyObject *args) {
    PyObject *obj;
    double thr;
    if (!PyArg_ParseTuple(args, "Od", &obj, &thr)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_RECORDS_RO) < 0) return NULL;
    if (b.ndim != 2 || !is_f32(&b) ||
        b.shape[0] > INT32_MAX || b.shape[1] > INT32_MAX) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "probability map must be a 2-D float32 array");
        return NULL;
    }
    Comp *comps = NULL;
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = label(b.buf, b.strides[0], b.strides[1], (int)b.shape[0], (int)b.shape[1], (float)thr,
              &comps);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (n < 0) return PyErr_NoMemory();
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        Comp *c = comps + i;
        PyObject *t = Py_BuildValue("(iiiind)", c->x0, c->y0, c->x1 + 1, c->y1 + 1, c->count, c->sum);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, t);
    }
    free(comps);
    return list;
}

static PyMethodDef methods[] = {
    {"resample", resample, METH_VARARGS,
     "resample(src, dst, src_box, rect, fill, bgr, bf16=False): fused resize/crop/pad/pack "
     "into dst."},
    {"components", components, METH_VARARGS,
     "components(prob, threshold): 8-connected components of prob > threshold."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
