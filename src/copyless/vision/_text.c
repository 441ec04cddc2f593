/* Text-reading kernels (OCR): the passes between a text detector and a recogniser, and the
 * one owner of connected components in copyless (union-find over a probability map).
 *
 * components(prob, threshold)
 *     8-connected components of prob > threshold in a 2-D float32 map of any strides
 *     (union-find, two passes). Returns [(x0, y0, x1, y1, count, sum)], x1/y1 exclusive:
 *     the boxes and scores of vision.text_boxes.
 *
 * regions(prob, threshold, dilate)
 *     8-connected components of prob > threshold in a 2-D float32 map of any strides, the
 *     mask first dilated by a 2x2 square when `dilate` (OpenCV's dilate with a 2x2 kernel,
 *     anchor at (1, 1): a pixel is set when any of (y-1..y, x-1..x) is above threshold, as
 *     PP-OCR's DB postprocess does). Returns [(x0, y0, x1, y1, hull)] (x1/y1 exclusive), hull
 *     the component's convex hull as bytes of int32 (x, y) pairs, counter-clockwise in
 *     image axes (y down), built from each row's leftmost and rightmost pixel (the hull of
 *     a pixel set is that of those extremes) with Andrew's monotone chain. A sixth field,
 *     `holes`, counts the component's holes: 4-connected components of the pixels that are
 *     not set, do not touch the map's border and are enclosed by this component (the
 *     pixel above a hole's first pixel in raster order is on its enclosing boundary). A DB
 *     text kernel is a solid band (no holes); a textured photo region has hundreds.
 *
 * warp(src, dst, homographies, sizes, scale, offset)
 *     Perspective crops sampled straight from a packed uint8 RGB/RGBX image into a float32
 *     NCHW batch tensor [N, 3, H, W]: for crop i, sizes[i] = (out_w, batch_index); output
 *     pixel (x, y) with x < out_w samples the source at homographies[i] applied to (x, y)
 *     (a 3x3 float64 matrix, row-major: output pixel -> source pixel), bilinear with the
 *     border replicated, and stores v * scale + offset; x >= out_w is zeroed (the
 *     recogniser's padding). One pass, no intermediate image. Runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int is_f32(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@') f++;
    return f[0] == 'f' && f[1] == '\0' && b->itemsize == 4;
}

static int is_u8(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@' || *f == '|') f++;
    return (f[0] == 'B' && f[1] == '\0') && b->itemsize == 1;
}

/* ---- regions ------------------------------------------------------------------------- */

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

static inline float prob_at(const char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

typedef struct {
    int x0, y0, x1, y1;
} Bounds;

static int64_t cross(const int32_t *o, const int32_t *a, const int32_t *b) {
    return (int64_t)(a[0] - o[0]) * (b[1] - o[1]) - (int64_t)(a[1] - o[1]) * (b[0] - o[0]);
}

/* Convex hull of pts (n points sorted by (y, x)) into out (up to n + 1 points); returns
 * its size. Collinear points are dropped. */
static int hull(const int32_t *pts, int n, int32_t *out) {
    if (n < 3) {
        memcpy(out, pts, sizeof(int32_t) * 2 * (size_t)n);
        return n;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        while (k >= 2 && cross(out + 2 * (k - 2), out + 2 * (k - 1), pts + 2 * i) <= 0) k--;
        memcpy(out + 2 * k++, pts + 2 * i, sizeof(int32_t) * 2);
    }
    for (int i = n - 2, t = k + 1; i >= 0; i--) {
        while (k >= t && cross(out + 2 * (k - 2), out + 2 * (k - 1), pts + 2 * i) <= 0) k--;
        memcpy(out + 2 * k++, pts + 2 * i, sizeof(int32_t) * 2);
    }
    return k - 1;
}

typedef struct {
    int32_t *lab;     /* h * w labels (compacted 1..m) */
    int32_t m;
    Bounds *bounds;   /* m */
    int32_t *holes;   /* m: holes enclosed by each component */
} Labels;

static void labels_free(Labels *L) {
    free(L->lab);
    free(L->bounds);
    free(L->holes);
    L->lab = NULL;
    L->bounds = NULL;
    L->holes = NULL;
}

static int on(const char *base, Py_ssize_t sy, Py_ssize_t sx, int y, int x, float thr,
              int dilate) {
    if (prob_at(base + y * sy + x * sx) > thr) return 1;
    if (!dilate) return 0;
    if (x && prob_at(base + y * sy + (x - 1) * sx) > thr) return 1;
    if (y && prob_at(base + (y - 1) * sy + x * sx) > thr) return 1;
    return x && y && prob_at(base + (y - 1) * sy + (x - 1) * sx) > thr;
}

static int label_map(const char *base, Py_ssize_t sy, Py_ssize_t sx, int h, int w, float thr,
                     int dilate, Labels *L) {
    size_t cap = 1024;
    int32_t n = 0, *parent = malloc(sizeof(int32_t) * cap), *compact = NULL;
    L->lab = calloc((size_t)h * (size_t)w, sizeof(int32_t));
    L->bounds = NULL;
    if (!L->lab || !parent) goto fail;
    parent[0] = 0;
    for (int y = 0; y < h; y++) {
        int32_t *lr = L->lab + (size_t)y * (size_t)w, *up = y ? lr - w : NULL;
        for (int x = 0; x < w; x++) {
            if (!on(base, sy, sx, y, x, thr, dilate)) continue;
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
    compact = calloc((size_t)n + 1, sizeof(int32_t));
    if (!compact) goto fail;
    int32_t m = 0;
    for (int32_t l = 1; l <= n; l++) {
        int32_t r = uf_find(parent, l);
        if (!compact[r]) compact[r] = ++m;
        compact[l] = compact[r];
    }
    L->bounds = malloc(sizeof(Bounds) * ((size_t)m + 1));
    if (!L->bounds) goto fail;
    for (int32_t c = 0; c < m; c++) L->bounds[c] = (Bounds){w, h, -1, -1};
    for (int y = 0; y < h; y++) {
        int32_t *lr = L->lab + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            if (!lr[x]) continue;
            lr[x] = compact[lr[x]];
            Bounds *b = L->bounds + lr[x] - 1;
            if (x < b->x0) b->x0 = x;
            if (y < b->y0) b->y0 = y;
            if (x > b->x1) b->x1 = x;
            if (y > b->y1) b->y1 = y;
        }
    }
    L->m = m;
    free(compact);
    free(parent);
    return 0;
fail:
    free(compact);
    free(parent);
    labels_free(L);
    return -1;
}

/* Holes per component: a union-find over the unset pixels (4-connected). A label is made
 * at a component's first pixel in raster order and unions keep the smaller label, so a
 * root's `owner` is the set component above that first pixel. Returns 0 or -1 (memory). */
static int count_holes(Labels *L, int h, int w) {
    size_t cap = 1024;
    int32_t n = 0, *bg = calloc((size_t)h * (size_t)w, sizeof(int32_t));
    int32_t *parent = malloc(sizeof(int32_t) * cap), *owner = malloc(sizeof(int32_t) * cap);
    uint8_t *edge = malloc(cap);
    L->holes = calloc((size_t)L->m + 1, sizeof(int32_t));
    if (!bg || !parent || !owner || !edge || !L->holes) goto fail;
    for (int y = 0; y < h; y++) {
        const int32_t *fg = L->lab + (size_t)y * (size_t)w;
        int32_t *lr = bg + (size_t)y * (size_t)w, *up = y ? lr - w : NULL;
        for (int x = 0; x < w; x++) {
            if (fg[x]) continue;
            int32_t a = x ? lr[x - 1] : 0, b = up ? up[x] : 0, l = a ? a : b;
            if (a && b) uf_union(parent, a, b);
            if (!l) {
                if ((size_t)(n + 2) > cap) {
                    int32_t *p2 = realloc(parent, sizeof(int32_t) * cap * 2);
                    if (p2) parent = p2;
                    int32_t *o2 = p2 ? realloc(owner, sizeof(int32_t) * cap * 2) : NULL;
                    if (o2) owner = o2;
                    uint8_t *e2 = o2 ? realloc(edge, cap * 2) : NULL;
                    if (!e2) goto fail;
                    edge = e2;
                    cap *= 2;
                }
                l = ++n;
                parent[l] = l;
                owner[l] = y ? fg[x - w] : 0;
                edge[l] = 0;
            }
            lr[x] = l;
            if (x == 0 || y == 0 || x == w - 1 || y == h - 1) edge[l] = 1;
        }
    }
    for (int32_t l = 1; l <= n; l++) {
        int32_t r = uf_find(parent, l);
        if (edge[l]) edge[r] = 1;
    }
    for (int32_t l = 1; l <= n; l++) {
        if (parent[l] == l && !edge[l] && owner[l] > 0) L->holes[owner[l] - 1]++;
    }
    free(bg);
    free(parent);
    free(owner);
    free(edge);
    return 0;
fail:
    free(bg);
    free(parent);
    free(owner);
    free(edge);
    return -1;
}

/* Row extremes of component c (1-based) -> hull; returns its size or -1 (no memory). */
static int component_hull(const Labels *L, int w, int32_t c, int32_t *pts, int32_t *out) {
    const Bounds *b = L->bounds + c - 1;
    int n = 0;
    for (int y = b->y0; y <= b->y1; y++) {
        const int32_t *lr = L->lab + (size_t)y * (size_t)w;
        int lo = -1, hi = -1;
        for (int x = b->x0; x <= b->x1; x++) {
            if (lr[x] != c) continue;
            if (lo < 0) lo = x;
            hi = x;
        }
        if (lo < 0) continue;
        pts[2 * n] = lo, pts[2 * n + 1] = y, n++;
        if (hi != lo) pts[2 * n] = hi, pts[2 * n + 1] = y, n++;
    }
    return hull(pts, n, out);
}

static PyObject *regions(PyObject *self, PyObject *args) {
    PyObject *obj;
    double thr;
    int dilate;
    if (!PyArg_ParseTuple(args, "Odp", &obj, &thr, &dilate)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_RECORDS_RO) < 0) return NULL;
    if (b.ndim != 2 || !is_f32(&b) || b.shape[0] < 1 || b.shape[1] < 1 ||
        b.shape[0] > 1 << 20 || b.shape[1] > 1 << 20) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "probability map must be a non-empty 2-D float32 array");
        return NULL;
    }
    const int h = (int)b.shape[0], w = (int)b.shape[1];
    Labels L = {NULL, 0, NULL, NULL};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = label_map(b.buf, b.strides[0], b.strides[1], h, w, (float)thr, dilate, &L);
    if (rc == 0) rc = count_holes(&L, h, w);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (rc < 0) {
        labels_free(&L);
        return PyErr_NoMemory();
    }
    int32_t *pts = malloc(sizeof(int32_t) * 4 * ((size_t)h + 1));
    int32_t *out = malloc(sizeof(int32_t) * 4 * ((size_t)h + 2));
    PyObject *list = (pts && out) ? PyList_New(L.m) : NULL;
    for (int32_t c = 1; list && c <= L.m; c++) {
        int k;
        Py_BEGIN_ALLOW_THREADS
        k = component_hull(&L, w, c, pts, out);
        Py_END_ALLOW_THREADS
        const Bounds *bd = L.bounds + c - 1;
        PyObject *t = Py_BuildValue("(iiiiy#i)", bd->x0, bd->y0, bd->x1 + 1, bd->y1 + 1,
                                    (const char *)out, (Py_ssize_t)(sizeof(int32_t) * 2 * k),
                                    (int)L.holes[c - 1]);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, c - 1, t);
    }
    if (!list && !PyErr_Occurred()) PyErr_NoMemory();
    free(pts);
    free(out);
    labels_free(&L);
    return list;
}

/* ---- warp ---------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *src;
    Py_ssize_t src_row;
    int src_w, src_h, src_px;
    float *dst;
    int n, h, w; /* dst [N, 3, h, w], C-contiguous */
    float scale, offset;
} Warp;

static void warp_one(const Warp *j, const double *m, int out_w, int bi) {
    const size_t plane = (size_t)j->h * (size_t)j->w;
    float *d0 = j->dst + (size_t)bi * 3 * plane;
    const double maxx = j->src_w - 1, maxy = j->src_h - 1;
    for (int y = 0; y < j->h; y++) {
        float *r = d0 + (size_t)y * j->w, *g = r + plane, *bl = g + plane;
        for (int x = 0; x < out_w; x++) {
            double zw = m[6] * x + m[7] * y + m[8];
            double sx = (m[0] * x + m[1] * y + m[2]) / zw;
            double sy = (m[3] * x + m[4] * y + m[5]) / zw;
            if (!(sx >= 0.0)) sx = 0.0; /* NaN too */
            if (!(sy >= 0.0)) sy = 0.0;
            if (sx > maxx) sx = maxx;
            if (sy > maxy) sy = maxy;
            int x0 = (int)sx, y0 = (int)sy;
            int x1 = x0 < j->src_w - 1 ? x0 + 1 : x0, y1 = y0 < j->src_h - 1 ? y0 + 1 : y0;
            float fx = (float)(sx - x0), fy = (float)(sy - y0);
            const uint8_t *p00 = j->src + y0 * j->src_row + (Py_ssize_t)x0 * j->src_px;
            const uint8_t *p01 = j->src + y0 * j->src_row + (Py_ssize_t)x1 * j->src_px;
            const uint8_t *p10 = j->src + y1 * j->src_row + (Py_ssize_t)x0 * j->src_px;
            const uint8_t *p11 = j->src + y1 * j->src_row + (Py_ssize_t)x1 * j->src_px;
            float v[3];
            for (int c = 0; c < 3; c++) {
                float top = p00[c] + (p01[c] - p00[c]) * fx;
                float bot = p10[c] + (p11[c] - p10[c]) * fx;
                v[c] = top + (bot - top) * fy;
            }
            r[x] = v[0] * j->scale + j->offset;
            g[x] = v[1] * j->scale + j->offset;
            bl[x] = v[2] * j->scale + j->offset;
        }
        if (out_w < j->w) {
            size_t pad = sizeof(float) * (size_t)(j->w - out_w);
            memset(r + out_w, 0, pad);
            memset(g + out_w, 0, pad);
            memset(bl + out_w, 0, pad);
        }
    }
}

static PyObject *warp(PyObject *self, PyObject *args) {
    PyObject *so, *dobj, *mo, *zo;
    double scale, offset;
    if (!PyArg_ParseTuple(args, "OOOOdd", &so, &dobj, &mo, &zo, &scale, &offset)) return NULL;
    Py_buffer sb, db, mb, zb;
    int got = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(so, &sb, PyBUF_RECORDS_RO) < 0) return NULL;
    got = 1;
    if (PyObject_GetBuffer(dobj, &db, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        goto done;
    got = 2;
    if (PyObject_GetBuffer(mo, &mb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 3;
    if (PyObject_GetBuffer(zo, &zb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 4;
    if (sb.ndim != 3 || !is_u8(&sb) || (sb.shape[2] != 3 && sb.shape[2] != 4) ||
        sb.strides[2] != 1 || sb.strides[1] != sb.shape[2] || sb.shape[0] < 1 ||
        sb.shape[1] < 1 || sb.shape[0] > INT32_MAX || sb.shape[1] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "source must be a packed uint8 (H, W, 3|4) image");
        goto done;
    }
    if (db.ndim != 4 || !is_f32(&db) || db.shape[1] != 3 || db.shape[2] < 1 ||
        db.shape[3] < 1 || db.shape[0] > INT32_MAX || db.shape[2] > INT32_MAX ||
        db.shape[3] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "destination must be a float32 [N, 3, H, W] tensor");
        goto done;
    }
    Py_ssize_t n = mb.len / (Py_ssize_t)(9 * sizeof(double));
    if (mb.itemsize != 8 || mb.len != n * 9 * (Py_ssize_t)sizeof(double) ||
        zb.itemsize != 4 || zb.len != n * 2 * 4) {
        PyErr_SetString(PyExc_ValueError,
                        "homographies must be float64 [n, 3, 3] and sizes int32 [n, 2]");
        goto done;
    }
    const int32_t *sizes = zb.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[2 * i] < 0 || sizes[2 * i] > db.shape[3] || sizes[2 * i + 1] < 0 ||
            sizes[2 * i + 1] >= db.shape[0]) {
            PyErr_SetString(PyExc_ValueError, "a crop's width or batch index is outside the tensor");
            goto done;
        }
    }
    Warp j = {sb.buf, sb.strides[0], (int)sb.shape[1], (int)sb.shape[0], (int)sb.shape[2],
              db.buf, (int)db.shape[0], (int)db.shape[2], (int)db.shape[3], (float)scale,
              (float)offset};
    const double *m = mb.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) warp_one(&j, m + 9 * i, sizes[2 * i], sizes[2 * i + 1]);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    if (got >= 4) PyBuffer_Release(&zb);
    if (got >= 3) PyBuffer_Release(&mb);
    if (got >= 2) PyBuffer_Release(&db);
    PyBuffer_Release(&sb);
    return result;
}

/* ---- components: the boxes a detector's map holds, with their scores ------------------ */

/* Each component's pixel count and sum of prob, in raster order (label_map's labels). */
static void tally(const char *base, Py_ssize_t sy, Py_ssize_t sx, int h, int w,
                  const Labels *L, Py_ssize_t *counts, double *sums) {
    for (int y = 0; y < h; y++) {
        const int32_t *lr = L->lab + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            if (!lr[x]) continue;
            counts[lr[x] - 1]++;
            sums[lr[x] - 1] += prob_at(base + y * sy + x * sx);
        }
    }
}

/* components(prob, threshold). Checked here: a 2-D float32 buffer ("f", or "=f"/"<f" for
 * an unaligned view: prob_at reads through memcpy), dims <= INT32_MAX, any strides. Python
 * (postprocess.text_boxes via _plane) passes a [H, W] float32 plane, converting other
 * float types first. Any threshold works (NaN selects nothing). The components are
 * regions' (label_map without dilation), with each one's pixel count and summed score. */
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
    int h = (int)b.shape[0], w = (int)b.shape[1], rc;
    Labels L = {NULL, 0, NULL, NULL};
    Py_ssize_t *counts = NULL;
    double *sums = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = label_map(b.buf, b.strides[0], b.strides[1], h, w, (float)thr, 0, &L);
    if (rc == 0) {
        counts = calloc((size_t)L.m + 1, sizeof(Py_ssize_t));
        sums = calloc((size_t)L.m + 1, sizeof(double));
        if (counts && sums) tally(b.buf, b.strides[0], b.strides[1], h, w, &L, counts, sums);
        else rc = -1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    PyObject *list = rc < 0 ? PyErr_NoMemory() : PyList_New(L.m);
    for (int32_t i = 0; list && i < L.m; i++) {
        const Bounds *c = L.bounds + i;
        PyObject *t = Py_BuildValue("(iiiind)", c->x0, c->y0, c->x1 + 1, c->y1 + 1, counts[i],
                                    sums[i]);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, t);
    }
    free(counts);
    free(sums);
    labels_free(&L);
    return list;
}

static PyMethodDef methods[] = {
    {"components", components, METH_VARARGS,
     "components(prob, threshold): 8-connected components of prob > threshold."},
    {"regions", regions, METH_VARARGS,
     "regions(prob, threshold, dilate): components of prob > threshold with convex hulls "
     "and hole counts."},
    {"warp", warp, METH_VARARGS,
     "warp(src, dst, homographies, sizes, scale, offset): perspective crops into a batch."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_text", NULL, -1, methods};

PyMODINIT_FUNC PyInit__text(void) { return PyModule_Create(&module); }
