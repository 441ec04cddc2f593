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
 * yuv_resize(y, u, v, dst, size, origin, coeffs, vertical_first, bgr, bf16=False)
 *     One pass from a 4:2:0 frame's planes (I420, or NV12's interleaved chroma as two views of
 *     pixel stride 2) to a destination view as resample's: each frame pixel converted as
 *     FFmpeg's swscale converts yuv420p to rgb24 (chroma of each 2x2 block, its 16-bit fixed
 *     point, `coeffs` from the stream's matrix and range), then PIL's bilinear resize of the
 *     frame to `size` (its fixed-point taps; two passes, each rounded to whole levels, in
 *     Pillow's order), of which dst is the crop at `origin`: the pixels torchvision's
 *     Resize + CenterCrop gives on PyAV's rgb24 frames, bit for bit. Each frame row is
 *     converted once; runs without the GIL.
 *
 * The text detector's connected components are _text.c's (components, regions).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h> /* x86-64's baseline: swscale's own 16-bit operations */
#endif

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
 * and writes of those go through memcpy, see store_row). */
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

/* ---- video frames: swscale's yuv420p -> rgb24, then PIL's bilinear resize ------------ */

/* PIL's fixed-point taps (Resample.c: precompute_coeffs, normalize_coeffs_8bpc) for outputs
 * [first, first + n) of a resize of in_size samples to out_size: the weights of a crop of the
 * resized image are the whole resize's, so the cropped pixels are PIL's to the bit. Each
 * weight also split as hi * 2^11 + lo (both < 2^12) in floats: the fast path's products and
 * sums are then whole numbers below 2^24, exact in float32, for up to SPLIT_TAPS taps. */
#define PIL_BITS 22
#define SPLIT_BITS 11
/* The float passes also built for AVX2 (8 lanes), picked at load time by the CPU. */
#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 6))
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif
#define SPLIT_TAPS 32

typedef struct {
    int *start, *count;
    int32_t *weights;  /* ksize per output, zero past count */
    float *hi, *lo;    /* the weights' split */
    int ksize;
} Taps;

static void taps_free(Taps *t) {
    free(t->start);
    free(t->count);
    free(t->weights);
    free(t->hi);
    free(t->lo);
    *t = (Taps){0};
}

static int taps_init(Taps *t, int in_size, int out_size, int first, int n) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale, support = filterscale;
    const double ss = 1.0 / filterscale; /* PIL multiplies by the inverse: the same doubles */
    t->ksize = (int)ceil(support) * 2 + 1;
    const size_t cells = (size_t)n * (size_t)t->ksize;
    t->start = malloc(sizeof(int) * (size_t)n);
    t->count = malloc(sizeof(int) * (size_t)n);
    t->weights = calloc(cells, sizeof(int32_t));
    t->hi = malloc(sizeof(float) * cells);
    t->lo = malloc(sizeof(float) * cells);
    double *k = malloc(sizeof(double) * (size_t)t->ksize);
    if (!t->start || !t->count || !t->weights || !t->hi || !t->lo || !k) {
        free(k);
        taps_free(t);
        return -1;
    }
    for (int o = 0; o < n; o++) {
        const double center = (first + o + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        if (lo > in_size - 1) lo = in_size - 1; /* unreachable for first + n <= out_size */
        if (hi <= lo) hi = lo + 1;
        if (hi - lo > t->ksize) hi = lo + t->ksize;
        double ww = 0.0;
        for (int i = 0; i < hi - lo; i++) {
            k[i] = triangle((i + lo - center + 0.5) * ss);
            ww += k[i];
        }
        int32_t *w = t->weights + (size_t)o * (size_t)t->ksize;
        for (int i = 0; i < hi - lo; i++) {
            const double v = ww != 0.0 ? k[i] / ww : k[i];
            w[i] = (int32_t)(0.5 + v * (1 << PIL_BITS)); /* triangle weights are >= 0 */
        }
        for (int i = 0; i < t->ksize; i++) {
            t->hi[(size_t)o * (size_t)t->ksize + (size_t)i] = (float)(w[i] >> SPLIT_BITS);
            t->lo[(size_t)o * (size_t)t->ksize + (size_t)i] =
                (float)(w[i] & ((1 << SPLIT_BITS) - 1));
        }
        t->start[o] = lo;
        t->count[o] = hi - lo;
    }
    free(k);
    return 0;
}

/* PIL's rounding of a sum of taps to a level: clip8 of (2^21 + sum) >> 22. */
static inline int32_t pil_level(int32_t sum) {
    const int32_t v = (sum + (1 << (PIL_BITS - 1))) >> PIL_BITS; /* arithmetic shift */
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* The same from the split sums (exact whole floats, see Taps). */
static inline float split_level(float hi, float lo) {
    return (float)pil_level(((int32_t)hi << SPLIT_BITS) + (int32_t)lo);
}

typedef struct {
    const uint8_t *y, *u, *v;
    Py_ssize_t y_row, u_row, u_px, v_row, v_px; /* byte strides; luma pixels are packed */
    int w, h;                                   /* the frame */
    int rw, rh, left, top;                      /* resized size, crop origin */
    /* swscale's term of each sample value (a pmulhw of the sample scaled by 8, less its
     * offset, by a coefficient): luma; V's red, U's and V's green, U's blue */
    int32_t luma[256], red_v[256], green_u[256], green_v[256], blue_u[256];
    int16_t coeff[6]; /* yCoeff, vrCoeff, ubCoeff, vgCoeff, ugCoeff, yOffset */
} Frame;

/* pmulhw: the high half of a signed 16 x 16 product (an arithmetic shift: gcc, clang). */
static inline int32_t mulhi(int32_t a, int32_t b) { return (a * b) >> 16; }

/* c: swscale's yCoeff, vrCoeff, ubCoeff, vgCoeff, ugCoeff, yOffset (int16 each). */
static void frame_tables(Frame *f, const long *c) {
    for (int i = 0; i < 6; i++) f->coeff[i] = (int16_t)c[i];
    for (int32_t s = 0; s < 256; s++) {
        int32_t yv = s * 8 - (int32_t)c[5]; /* psubw wraps to 16 bits */
        yv = ((yv + 32768) & 0xffff) - 32768;
        const int32_t cv = s * 8 - 1024; /* less the fixed chroma offset 0x0400 */
        f->luma[s] = mulhi(yv, (int32_t)c[0]);
        f->red_v[s] = mulhi(cv, (int32_t)c[1]);
        f->blue_u[s] = mulhi(cv, (int32_t)c[2]);
        f->green_v[s] = mulhi(cv, (int32_t)c[3]);
        f->green_u[s] = mulhi(cv, (int32_t)c[4]);
    }
}

/* packuswb: to 0..255 (paddsw never saturates on these terms); rarely taken on pictures. */
static inline int32_t clamp8(int32_t v) {
    if ((uint32_t)v > 255u) v = v < 0 ? 0 : 255;
    return v;
}

/* The (red, green, blue) chroma terms of chroma row cr, chroma columns [c0, c1). */
static void chroma_terms(const Frame *f, int cr, int c0, int c1, int32_t *terms) {
    const uint8_t *up = f->u + (Py_ssize_t)cr * f->u_row;
    const uint8_t *vp = f->v + (Py_ssize_t)cr * f->v_row;
    for (int c = c0; c < c1; c++, terms += 3) {
        const uint8_t u = up[(Py_ssize_t)c * f->u_px], v = vp[(Py_ssize_t)c * f->v_px];
        terms[0] = f->red_v[v];
        terms[1] = f->green_u[u] + f->green_v[v];
        terms[2] = f->blue_u[u];
    }
}

/* Frame row r, columns [x0, x1), as swscale's yuv420p -> rgb24 fast path computes them
 * (libswscale/x86/yuv_2_rgb.asm; its C tables differ by a level here and there): the chroma
 * of row r / 2 and column x / 2 (terms: chroma_terms of that row from column x0 / 2), each
 * channel written to out[(x - x0) * step + c * cstep]. */
static inline void yuv_row(const Frame *f, int r, int x0, int x1, const int32_t *terms,
                           float *out, size_t step, size_t cstep) {
    const uint8_t *yp = f->y + (Py_ssize_t)r * f->y_row;
    const int c0 = x0 >> 1;
    for (int x = x0; x < x1; x++, out += step) {
        const int32_t *c = terms + 3 * ((x >> 1) - c0);
        const int32_t luma = f->luma[yp[x]];
        out[0] = (float)clamp8(luma + c[0]);
        out[cstep] = (float)clamp8(luma + c[1]);
        out[2 * cstep] = (float)clamp8(luma + c[2]);
    }
}

/* Writes one output row (n RGB levels as floats) into dst row y: bytes straight into a
 * packed uint8 view, else through store_row's conversions (exact: whole levels). */
static void frame_store(const Job *j, int y, const float *rgb, uint8_t *u8) {
    if (j->dst_kind == KIND_U8 && j->dst_c == 4 && j->dst_sc == 1 && j->dst_sx == 4) {
        char *p = j->dst + y * j->dst_sy;
        const int r = j->bgr ? 2 : 0, b = 2 - r;
        for (int x = 0; x < j->dst_w; x++, rgb += 3) {
            uint32_t px = (uint32_t)rgb[r] | (uint32_t)rgb[1] << 8 | (uint32_t)rgb[b] << 16;
            memcpy(p + 4 * x, &px, 4); /* little-endian bytes: R G B 0 */
        }
        return;
    }
    store_row(j, y, rgb, 0, j->dst_w, u8);
}

/* PIL's horizontal pass, one row of RGB levels (source columns from col0) -> out (n). */
static void hpass_row(const Taps *tx, int col0, const float *rgb, float *out, int n) {
    for (int o = 0; o < n; o++, out += 3) {
        const int32_t *k = tx->weights + (size_t)o * (size_t)tx->ksize;
        const float *p = rgb + (size_t)(tx->start[o] - col0) * 3;
        int32_t s0 = 0, s1 = 0, s2 = 0;
        for (int i = 0; i < tx->count[o]; i++, p += 3) {
            s0 += (int32_t)p[0] * k[i];
            s1 += (int32_t)p[1] * k[i];
            s2 += (int32_t)p[2] * k[i];
        }
        out[0] = (float)pil_level(s0);
        out[1] = (float)pil_level(s1);
        out[2] = (float)pil_level(s2);
    }
}

/* PIL's vertical pass: `count` rows of `width` levels, weights k -> out. */
static void vpass_row(float *const *rows, int count, const int32_t *k, int32_t *acc,
                      float *out, size_t width) {
    memset(acc, 0, sizeof(int32_t) * width);
    for (int t = 0; t < count; t++)
        for (size_t i = 0; i < width; i++) acc[i] += (int32_t)rows[t][i] * k[t];
    for (size_t i = 0; i < width; i++) out[i] = (float)pil_level(acc[i]);
}

/* The vertical pass on split weights (the fast path): whole floats, vectorized. */
WIDE static void vpass_split(float *const *rows, int count, const float *hi, const float *lo,
                        float *restrict ahi, float *restrict alo, float *restrict out,
                        size_t width) {
    for (size_t i = 0; i < width; i++) ahi[i] = alo[i] = 0.0f;
    for (int t = 0; t < count; t++) {
        const float *restrict row = rows[t];
        const float h = hi[t], l = lo[t];
        for (size_t i = 0; i < width; i++) {
            ahi[i] += row[i] * h;
            alo[i] += row[i] * l;
        }
    }
    for (size_t i = 0; i < width; i++) out[i] = split_level(ahi[i], alo[i]);
}

/* The horizontal pass on split weights over BLOCK rows at once: the rows are the lanes of
 * the inner loop (one row's taps would be a gather). t holds channel c of column x of row i
 * at t[((x - col0) * 3 + c) * BLOCK + i]; row i's n outputs go to outs[i]. */
#define BLOCK 8

WIDE static void hpass_block(const Taps *tx, int col0, const float *t, float *const *outs, int rows,
                        int n) {
    for (int o = 0; o < n; o++) {
        const size_t at = (size_t)o * (size_t)tx->ksize;
        const float *p = t + (size_t)(tx->start[o] - col0) * 3 * BLOCK;
        float hi[3 * BLOCK] = {0}, lo[3 * BLOCK] = {0};
        for (int j = 0; j < tx->count[o]; j++, p += 3 * BLOCK) {
            const float h = tx->hi[at + (size_t)j], l = tx->lo[at + (size_t)j];
            for (int e = 0; e < 3 * BLOCK; e++) {
                hi[e] += p[e] * h;
                lo[e] += p[e] * l;
            }
        }
        float px[3 * BLOCK];
        for (int e = 0; e < 3 * BLOCK; e++) px[e] = split_level(hi[e], lo[e]);
        for (int i = 0; i < rows; i++) {
            float *q = outs[i] + (size_t)o * 3;
            q[0] = px[i];
            q[1] = px[BLOCK + i];
            q[2] = px[2 * BLOCK + i];
        }
    }
}

/* What run_frame works in: ring rows of `held` floats, scratch for one row or block. */
typedef struct {
    float *ring, **rows, *rgb, *mid, *line, *ahi, *alo;
    int32_t *terms, *acc;
    int *tag;
    uint8_t *u8, *bytes; /* bytes: a luma row and two chroma rows, padded (SSE2 path) */
    int16_t *planes, *up; /* BLOCK rows x 3 channels, 3 upsampled chroma terms (SSE2) */
    int pad;              /* their width: columns from col0 & ~1, a multiple of 16 */
} Work;

static void work_free(Work *w) {
    free(w->ring);
    free(w->rows);
    free(w->rgb);
    free(w->mid);
    free(w->line);
    free(w->ahi);
    free(w->alo);
    free(w->terms);
    free(w->acc);
    free(w->tag);
    free(w->u8);
    free(w->bytes);
    free(w->planes);
    free(w->up);
}

#if defined(__SSE2__)
/* The 8 x 8 transpose of int16 vectors r[0..7] (row i -> lane i of each result). */
static inline void transpose8(__m128i *r) {
    const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
    const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
    const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
    const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
    const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
    const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
    const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
    const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
    r[0] = _mm_unpacklo_epi64(b0, b4);
    r[1] = _mm_unpackhi_epi64(b0, b4);
    r[2] = _mm_unpacklo_epi64(b1, b5);
    r[3] = _mm_unpackhi_epi64(b1, b5);
    r[4] = _mm_unpacklo_epi64(b2, b6);
    r[5] = _mm_unpackhi_epi64(b2, b6);
    r[6] = _mm_unpacklo_epi64(b3, b7);
    r[7] = _mm_unpackhi_epi64(b3, b7);
}

/* w->pad bytes of row `row` (stride) from column x (pixel step px), the frame's last column
 * repeated past its width: the vector loads stay inside w->bytes. */
static void gather_bytes(const uint8_t *row, Py_ssize_t px, int x, int width, int count,
                         uint8_t *out) {
    if (px == 1 && x + count <= width) {
        memcpy(out, row + x, (size_t)count);
        return;
    }
    for (int i = 0; i < count; i++) {
        const int c = x + i < width ? x + i : width - 1;
        out[i] = row[(Py_ssize_t)c * px];
    }
}

/* swscale's chroma terms of chroma row cr from chroma column x0 / 2, each repeated for the
 * two pixels it covers, into w->up (red, green, blue; w->pad each): its own operations,
 * psllw, psubsw of 0x0400, pmulhw, paddsw. */
static void chroma_up(const Frame *f, int cr, int x0, Work *w) {
    const int half = w->pad / 2, cw = (f->w + 1) >> 1;
    uint8_t *u = w->bytes + w->pad, *v = u + half;
    gather_bytes(f->u + (Py_ssize_t)cr * f->u_row, f->u_px, x0 >> 1, cw, half, u);
    gather_bytes(f->v + (Py_ssize_t)cr * f->v_row, f->v_px, x0 >> 1, cw, half, v);
    const __m128i zero = _mm_setzero_si128(), offset = _mm_set1_epi16(0x400);
    const __m128i vr = _mm_set1_epi16(f->coeff[1]), ub = _mm_set1_epi16(f->coeff[2]);
    const __m128i vg = _mm_set1_epi16(f->coeff[3]), ug = _mm_set1_epi16(f->coeff[4]);
    int16_t *red = w->up, *green = red + w->pad, *blue = green + w->pad;
    for (int i = 0; i < half; i += 8) {
        const __m128i cu = _mm_subs_epi16(
            _mm_slli_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(u + i)), zero), 3),
            offset);
        const __m128i cv = _mm_subs_epi16(
            _mm_slli_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(v + i)), zero), 3),
            offset);
        const __m128i r = _mm_mulhi_epi16(cv, vr), b = _mm_mulhi_epi16(cu, ub);
        const __m128i g = _mm_adds_epi16(_mm_mulhi_epi16(cu, ug), _mm_mulhi_epi16(cv, vg));
        _mm_storeu_si128((__m128i *)(red + 2 * i), _mm_unpacklo_epi16(r, r));
        _mm_storeu_si128((__m128i *)(red + 2 * i + 8), _mm_unpackhi_epi16(r, r));
        _mm_storeu_si128((__m128i *)(green + 2 * i), _mm_unpacklo_epi16(g, g));
        _mm_storeu_si128((__m128i *)(green + 2 * i + 8), _mm_unpackhi_epi16(g, g));
        _mm_storeu_si128((__m128i *)(blue + 2 * i), _mm_unpacklo_epi16(b, b));
        _mm_storeu_si128((__m128i *)(blue + 2 * i + 8), _mm_unpackhi_epi16(b, b));
    }
}

/* Frame rows [s, s + count) into the block layout of hpass_block (w->rgb): each row
 * converted 8 pixels at a time (pmulhw of the luma, paddsw of the chroma terms, packuswb's
 * clamp), then 8 x 8 transposes put the rows in the lanes. */
static void yuv_block_sse2(const Frame *f, int s, int count, int col0, int col1, Work *w) {
    const int x0 = col0 & ~1, off = col0 - x0, nx = col1 - col0;
    const __m128i zero = _mm_setzero_si128(), top = _mm_set1_epi16(255);
    const __m128i cy = _mm_set1_epi16(f->coeff[0]), yoff = _mm_set1_epi16(f->coeff[5]);
    for (int i = 0, cached = -1; i < count; i++) {
        if ((s + i) >> 1 != cached) {
            cached = (s + i) >> 1;
            chroma_up(f, cached, x0, w);
        }
        gather_bytes(f->y + (Py_ssize_t)(s + i) * f->y_row, 1, x0, f->w, w->pad, w->bytes);
        int16_t *red = w->planes + (size_t)i * 3 * (size_t)w->pad;
        int16_t *green = red + w->pad, *blue = green + w->pad;
        for (int x = 0; x < w->pad; x += 8) {
            const __m128i y8 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(w->bytes + x)), zero);
            const __m128i luma = _mm_mulhi_epi16(_mm_sub_epi16(_mm_slli_epi16(y8, 3), yoff), cy);
            const __m128i *up = (const __m128i *)(w->up + x);
            __m128i r = _mm_adds_epi16(luma, _mm_loadu_si128(up));
            __m128i g = _mm_adds_epi16(luma, _mm_loadu_si128((const __m128i *)(w->up + w->pad + x)));
            __m128i b = _mm_adds_epi16(luma, _mm_loadu_si128((const __m128i *)(w->up + 2 * w->pad + x)));
            r = _mm_max_epi16(_mm_min_epi16(r, top), zero);
            g = _mm_max_epi16(_mm_min_epi16(g, top), zero);
            b = _mm_max_epi16(_mm_min_epi16(b, top), zero);
            _mm_storeu_si128((__m128i *)(red + x), r);
            _mm_storeu_si128((__m128i *)(green + x), g);
            _mm_storeu_si128((__m128i *)(blue + x), b);
        }
    }
    for (int c = 0; c < 3; c++) {
        for (int x = 0; x < nx; x += 8) {
            __m128i r[BLOCK];
            for (int i = 0; i < BLOCK; i++) /* rows past count: stale lanes, never stored */
                r[i] = _mm_loadu_si128((const __m128i *)(w->planes +
                                                         ((size_t)i * 3 + (size_t)c) * (size_t)w->pad +
                                                         (size_t)(off + x)));
            transpose8(r);
            for (int k = 0; k < 8 && x + k < nx; k++) {
                float *q = w->rgb + ((size_t)(x + k) * 3 + (size_t)c) * BLOCK;
                _mm_storeu_ps(q, _mm_cvtepi32_ps(_mm_unpacklo_epi16(r[k], zero)));
                _mm_storeu_ps(q + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(r[k], zero)));
            }
        }
    }
}
#endif

/* Frame rows into the ring. Output rows take non-decreasing windows of at most ksize rows,
 * so with ksize + BLOCK slots frame row s lives in slot s % slots until no window needs it:
 * each frame row is converted once. Fast path (horizontal first, at most SPLIT_TAPS taps):
 * rows converted and resampled horizontally BLOCK at a time; else one row at a time, kept
 * converted (vertical first) or resampled horizontally. */
static void fill_rows(const Frame *f, const Taps *tx, const Taps *ty, int oy, int col0, int col1,
                      int n, int mode, Work *w, int slots, size_t held) {
    const int c0 = col0 >> 1, c1 = (col1 + 1) >> 1;
    for (int t = 0; t < ty->count[oy]; t++) {
        const int s = ty->start[oy] + t, slot = s % slots;
        w->rows[t] = w->ring + (size_t)slot * held;
        if (w->tag[slot] == s) continue;
        const int count = mode == 0 ? (f->h - s < BLOCK ? f->h - s : BLOCK) : 1;
        float *outs[BLOCK];
        for (int i = 0; i < count; i++) {
            outs[i] = w->ring + (size_t)((s + i) % slots) * held;
            w->tag[(s + i) % slots] = s + i;
        }
#if defined(__SSE2__)
        if (mode == 0) {
            yuv_block_sse2(f, s, count, col0, col1, w);
            hpass_block(tx, col0, w->rgb, outs, count, n);
            continue;
        }
#endif
        for (int i = 0, cached = -1; i < count; i++) {
            if ((s + i) >> 1 != cached) {
                cached = (s + i) >> 1;
                chroma_terms(f, cached, c0, c1, w->terms);
            }
            if (mode == 0) /* block layout */
                yuv_row(f, s + i, col0, col1, w->terms, w->rgb + i, 3 * BLOCK, BLOCK);
            else if (mode == 1) /* horizontal first */
                yuv_row(f, s, col0, col1, w->terms, w->rgb, 3, 1);
            else /* vertical first: the converted row is what the ring keeps */
                yuv_row(f, s, col0, col1, w->terms, outs[0], 3, 1);
        }
        if (mode == 0) hpass_block(tx, col0, w->rgb, outs, count, n);
        else if (mode == 1) hpass_row(tx, col0, w->rgb, outs[0], n);
    }
}

/* mode 0: the fast path; 1: horizontal first, row by row; 2: vertical first. */
static int run_frame(const Frame *f, const Job *j, int vertical_first) {
    Taps tx = {0}, ty = {0};
    Work w = {0};
    int rc = -1;
    const int n = j->dst_w;
    if (taps_init(&tx, f->w, f->rw, f->left, n) < 0) return -1;
    if (taps_init(&ty, f->h, f->rh, f->top, j->dst_h) < 0) goto done;
    int col0 = tx.start[0], col1 = 0;
    for (int o = 0; o < n; o++) {
        if (tx.start[o] < col0) col0 = tx.start[o];
        if (tx.start[o] + tx.count[o] > col1) col1 = tx.start[o] + tx.count[o];
    }
    const int mode = vertical_first ? 2 : (tx.ksize <= SPLIT_TAPS && ty.ksize <= SPLIT_TAPS ? 0 : 1);
    const int slots = ty.ksize + BLOCK;
    const size_t width = (size_t)n * 3, span = (size_t)(col1 - col0) * 3;
    const size_t held = mode == 2 ? span : width, wide = span > width ? span : width;
    w.ring = malloc(sizeof(float) * held * (size_t)slots);
    w.rows = malloc(sizeof(float *) * (size_t)slots);
    w.rgb = malloc(sizeof(float) * (span + 24) * (mode == 0 ? BLOCK : 1));
    w.mid = malloc(sizeof(float) * span);
    w.line = malloc(sizeof(float) * width);
    w.ahi = malloc(sizeof(float) * wide);
    w.alo = malloc(sizeof(float) * wide);
    w.terms = malloc(sizeof(int32_t) * (span / 2 + 6));
    w.acc = malloc(sizeof(int32_t) * wide);
    w.tag = malloc(sizeof(int) * (size_t)slots);
    w.u8 = malloc(width + 4);
    w.pad = ((col0 & 1) + (col1 - col0) + 8 + 15) / 16 * 16;
    w.bytes = calloc((size_t)w.pad * 2, 1);
    w.planes = calloc((size_t)w.pad * 3 * BLOCK, sizeof(int16_t));
    w.up = calloc((size_t)w.pad * 3, sizeof(int16_t));
    if (!w.ring || !w.rows || !w.rgb || !w.mid || !w.line || !w.ahi || !w.alo || !w.terms ||
        !w.acc || !w.tag || !w.u8 || !w.bytes || !w.planes || !w.up)
        goto done;
    for (int s = 0; s < slots; s++) w.tag[s] = -1;
    for (int oy = 0; oy < j->dst_h; oy++) {
        fill_rows(f, &tx, &ty, oy, col0, col1, n, mode, &w, slots, held);
        const size_t at = (size_t)oy * (size_t)ty.ksize;
        if (mode == 0) {
            vpass_split(w.rows, ty.count[oy], ty.hi + at, ty.lo + at, w.ahi, w.alo, w.line,
                        width);
        } else if (mode == 1) {
            vpass_row(w.rows, ty.count[oy], ty.weights + at, w.acc, w.line, width);
        } else {
            vpass_row(w.rows, ty.count[oy], ty.weights + at, w.acc, w.mid, span);
            hpass_row(&tx, col0, w.mid, w.line, n);
        }
        frame_store(j, oy, w.line, w.u8);
    }
    rc = 0;
done:
    work_free(&w);
    taps_free(&tx);
    taps_free(&ty);
    return rc;
}

/* A 2-D uint8 plane of positive strides, at least rows x cols. */
static int check_plane(const Py_buffer *b, Py_ssize_t rows, Py_ssize_t cols, const char *name) {
    if (b->ndim != 2 || b->itemsize != 1 || (b->format && strcmp(b->format, "B") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s plane must be a 2-D uint8 array", name);
        return -1;
    }
    if (b->strides[0] <= 0 || b->strides[1] <= 0) {
        PyErr_Format(PyExc_ValueError, "%s plane must have positive strides", name);
        return -1;
    }
    if (b->shape[0] != rows || b->shape[1] != cols) {
        PyErr_Format(PyExc_ValueError, "%s plane is %zd x %zd, the frame needs %zd x %zd", name,
                     b->shape[0], b->shape[1], rows, cols);
        return -1;
    }
    return 0;
}

#define FRAME_MAX (1 << 16) /* sides of frames and resizes: int arithmetic stays in range */

/* yuv_resize(y, u, v, dst, size, origin, coeffs, vertical_first, bgr, bf16). Checked here, whatever the
 * caller: y a 2-D uint8 (H, W) plane with packed pixels and a positive row stride, 1 <= H, W
 * <= FRAME_MAX; u and v 2-D uint8 ((H + 1) / 2, (W + 1) / 2) of positive strides (an NV12
 * plane's interleaved halves: pixel stride 2); dst as for resample (check_dst); size (RW, RH)
 * in 1..FRAME_MAX; origin (left, top) >= 0 with the destination inside the resized image;
 * six coefficients in int16 range. Python (vision.classify_frame) checks the same first. */
static PyObject *yuv_resize(PyObject *self, PyObject *args) {
    PyObject *yo, *uo, *vo, *dst_obj;
    Py_ssize_t rw, rh, left, top;
    long c[6];
    int vertical_first, bgr, bf16 = 0;
    if (!PyArg_ParseTuple(args, "OOOO(nn)(nn)(llllll)pp|p", &yo, &uo, &vo, &dst_obj, &rw, &rh,
                          &left, &top, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5],
                          &vertical_first, &bgr, &bf16))
        return NULL;
    Py_buffer yb = {0}, ub = {0}, vb = {0}, db = {0};
    int rc = -1, kind = KIND_U8;
    if (PyObject_GetBuffer(yo, &yb, PyBUF_RECORDS_RO) < 0) return NULL;
    if (PyObject_GetBuffer(uo, &ub, PyBUF_RECORDS_RO) < 0) goto release;
    if (PyObject_GetBuffer(vo, &vb, PyBUF_RECORDS_RO) < 0) goto release;
    if (PyObject_GetBuffer(dst_obj, &db, PyBUF_RECORDS) < 0) goto release;
    if (yb.ndim != 2 || yb.itemsize != 1 || (yb.format && strcmp(yb.format, "B") != 0) ||
        yb.strides[1] != 1 || yb.strides[0] < yb.shape[1] || yb.shape[0] < 1 ||
        yb.shape[1] < 1 || yb.shape[0] > FRAME_MAX || yb.shape[1] > FRAME_MAX) {
        PyErr_SetString(PyExc_ValueError, "luma plane must be a 2-D uint8 (H, W) array of "
                                          "packed pixels, 1 <= H, W <= 65536");
        goto release;
    }
    const Py_ssize_t ch = (yb.shape[0] + 1) / 2, cw = (yb.shape[1] + 1) / 2;
    if (check_plane(&ub, ch, cw, "U") < 0 || check_plane(&vb, ch, cw, "V") < 0 ||
        check_dst(&db, bf16, &kind) < 0)
        goto release;
    if (rw < 1 || rh < 1 || rw > FRAME_MAX || rh > FRAME_MAX || left < 0 || top < 0 ||
        db.shape[1] > rw || db.shape[0] > rh || left > rw - db.shape[1] ||
        top > rh - db.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "the destination must lie inside the resized frame");
        goto release;
    }
    for (int i = 0; i < 6; i++) {
        if (c[i] < -32768 || c[i] > 32767) {
            PyErr_SetString(PyExc_ValueError, "colour coefficients must be int16");
            goto release;
        }
    }
    Frame *f = malloc(sizeof(Frame));
    if (!f) {
        PyErr_NoMemory();
        goto release;
    }
    *f = (Frame){
        .y = yb.buf, .u = ub.buf, .v = vb.buf, .y_row = yb.strides[0], .u_row = ub.strides[0],
        .u_px = ub.strides[1], .v_row = vb.strides[0], .v_px = vb.strides[1],
        .w = (int)yb.shape[1], .h = (int)yb.shape[0], .rw = (int)rw, .rh = (int)rh,
        .left = (int)left, .top = (int)top,
    };
    frame_tables(f, c);
    Job j = {
        .dst = db.buf, .dst_sy = db.strides[0], .dst_sx = db.strides[1],
        .dst_sc = db.strides[2], .dst_w = (int)db.shape[1], .dst_h = (int)db.shape[0],
        .dst_c = (int)db.shape[2], .dst_kind = kind, .ow = (int)db.shape[1],
        .oh = (int)db.shape[0], .bgr = bgr,
    };
    Py_BEGIN_ALLOW_THREADS
    rc = run_frame(f, &j, vertical_first);
    Py_END_ALLOW_THREADS
    free(f);
    if (rc < 0) PyErr_NoMemory();
release:
    if (yb.obj) PyBuffer_Release(&yb);
    if (ub.obj) PyBuffer_Release(&ub);
    if (vb.obj) PyBuffer_Release(&vb);
    if (db.obj) PyBuffer_Release(&db);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"resample", resample, METH_VARARGS,
     "resample(src, dst, src_box, rect, fill, bgr, bf16=False): fused resize/crop/pad/pack "
     "into dst."},
    {"yuv_resize", yuv_resize, METH_VARARGS,
     "yuv_resize(y, u, v, dst, size, origin, coeffs, vertical_first, bgr, bf16=False): "
     "swscale's yuv420p -> "
     "rgb24, PIL's bilinear resize to size, the crop at origin into dst."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
