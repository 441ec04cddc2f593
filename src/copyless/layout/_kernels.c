/* copyless.layout._kernels: the fused layout + dtype + quantization conversion.
 *
 * Python (copyless/layout/plan.py) turns two views of one logical tensor into a loop nest
 * over the destination: up to MAXD dims, each with an extent and the byte strides of source
 * and destination, plus the channel padding rule. This module walks that nest once and
 * converts each innermost row with a dtype-specialised kernel, so a transpose, a cast, a
 * (de)quantization and channel padding cost one pass over the bytes, with no full-size
 * temporary: strided rows go through 8 KiB stack buffers (gather -> kernel -> scatter).
 *
 * Element semantics (the Python docstrings repeat them):
 *   float -> int   q = clamp(round(x / scale) + zp), x / scale in float32 (as ONNX
 *                  QuantizeLinear), round to nearest even or toward zero, NaN -> zp.
 *   int -> float   (q - zp) * scale in float32, then rounded to the float destination.
 *   float -> float IEEE round to nearest even (fp16 overflows to inf, NaN stays NaN).
 *   int -> int     exact when the value fits, else saturated to the destination range.
 *   bool           x != 0 into bool; 0 / 1 out of bool.
 * The GIL is released while a large conversion runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 12
#define CHUNK 1024
#define NOGIL_ELEMENTS 16384

enum { T_BOOL, T_I8, T_U8, T_I16, T_U16, T_BF16, T_F16, T_I32, T_U32, T_F32, T_I64, T_U64, T_COUNT };
enum { OP_COPY, OP_FCAST, OP_QUANT, OP_DEQUANT, OP_ICAST, OP_FTOBOOL, OP_COUNT };
enum { PAD_NONE, PAD_FILL, PAD_SKIP };

static const int ITEMSIZE[T_COUNT] = {1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8};

typedef struct PlanObject PlanObject;
typedef void (*kernel_fn)(const PlanObject *p, const char *src, char *dst, Py_ssize_t n);

struct PlanObject {
    PyObject_HEAD
    int ndim;
    Py_ssize_t shape[MAXD], sstr[MAXD], dstr[MAXD];
    int stype, dtype, op, toward_zero;
    float scale, inv;
    int exact_inv;  /* scale is a power of two: x * inv == x / scale exactly */
    int64_t zp;
    float lo_f, hi_f;   /* clamp bounds of x / scale, integer-valued (<= 16-bit targets) */
    double lo_d, hi_d;  /* the destination's range (32/64-bit targets) */
    int pad_dim, cb_dim, pad_mode;
    Py_ssize_t group, channels, elements;
    unsigned char pad[8];
    Py_ssize_t src_nbytes, dst_nbytes;
    int strides_aligned;
    kernel_fn kernel;
    void (*interleave)(const char *rows, char *dst, Py_ssize_t m);  /* or NULL */
    int fused_pixels;  /* quantize float32 planes straight into 4-byte pixels (see below) */
};

/* ---------------------------------------------------------------- scalar conversions */

static inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* float32 -> bfloat16, round to nearest even; NaN stays a quiet NaN (as ml_dtypes). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t x = f_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)(((x & 0x7fffffffu) > 0x7f800000u) ? ((x >> 16) | 0x40u) : r);
}

static inline float bf16_to_f32(uint16_t h) { return bits_f((uint32_t)h << 16); }

/* float32 -> IEEE half, round to nearest even, branch-free so loops vectorise. */
static inline uint16_t f32_to_f16(float f) {
    uint32_t x = f_bits(f);
    uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t denorm = f_bits(bits_f(x) + bits_f(denorm_magic)) - denorm_magic;
    uint32_t special = (x > 0x7f800000u) ? 0x7e00u : 0x7c00u;
    uint32_t o = (x >= 0x47800000u) ? special : ((x < 0x38800000u) ? denorm : normal);
    return (uint16_t)(o | (sign >> 16));
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
    uint32_t exp = o & 0x0f800000u;
    o += (127u - 15u) << 23;
    uint32_t special = o + ((128u - 16u) << 23);
    uint32_t denorm = f_bits(bits_f(o + (1u << 23)) - bits_f(113u << 23));
    o = (exp == 0x0f800000u) ? special : ((exp == 0) ? denorm : o);
    return bits_f(o | (((uint32_t)h & 0x8000u) << 16));
}

/* x / scale clamped to [lo, hi] and rounded, for destinations of <= 16 bits. The magic
 * constant 1.5 * 2^23 rounds to nearest even without libm (|v| < 2^22 after clamping). */
static inline int32_t quant_small(float x, float scale, float lo, float hi, int tz, int mul) {
    /* A power-of-two scale has an exact inverse: multiplying is then bit-identical. */
    float v = mul ? x * scale : x / scale;
    v = (v == v) ? v : 0.0f;
    v = (v < lo) ? lo : v;
    v = (v > hi) ? hi : v;
    if (!tz) v = (v + 12582912.0f) - 12582912.0f;
    return (int32_t)v;
}

/* ------------------------------------------------------------- specialised kernels */

static void k_copy(const PlanObject *p, const char *s, char *d, Py_ssize_t n) {
    memcpy(d, s, (size_t)n * (size_t)ITEMSIZE[p->stype]);
}

#define QUANT_KERNEL(NAME, DT, TZ, MUL)                                                \
    static void NAME(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {     \
        const float *s = (const float *)s_;                                             \
        DT *d = (DT *)d_;                                                               \
        const float scale = MUL ? p->inv : p->scale, lo = p->lo_f, hi = p->hi_f;        \
        const int32_t zp = (int32_t)p->zp;                                              \
        for (Py_ssize_t i = 0; i < n; i++)                                              \
            d[i] = (DT)(quant_small(s[i], scale, lo, hi, TZ, MUL) + zp);                \
    }
#if defined(__SSE2__)
#include <emmintrin.h>
/* SSE2 (the x86-64 baseline): cvtps2dq rounds to nearest even under the default MXCSR
 * mode that CPython and numpy keep, so one instruction replaces the magic-number rounding,
 * and saturating packs narrow 16 values at once. Same results as quant_small. */
#define QUANT_KERNEL_SSE2(NAME, DT, TZ, MUL, PACK16)                                   \
    static void NAME(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {     \
        const float *s = (const float *)s_;                                             \
        DT *d = (DT *)d_;                                                               \
        const float scale = MUL ? p->inv : p->scale;                                    \
        const __m128 vs = _mm_set1_ps(scale), lo = _mm_set1_ps(p->lo_f);                \
        const __m128 hi = _mm_set1_ps(p->hi_f);                                         \
        const __m128i zp = _mm_set1_epi16((short)p->zp);                                \
        Py_ssize_t i = 0;                                                               \
        for (; i + 16 <= n; i += 16) {                                                  \
            __m128i q[4];                                                               \
            for (int j = 0; j < 4; j++) {                                               \
                __m128 v = _mm_loadu_ps(s + i + 4 * j);                                 \
                v = MUL ? _mm_mul_ps(v, vs) : _mm_div_ps(v, vs);                        \
                v = _mm_and_ps(v, _mm_cmpeq_ps(v, v));                                  \
                v = _mm_min_ps(_mm_max_ps(v, lo), hi);                                  \
                q[j] = TZ ? _mm_cvttps_epi32(v) : _mm_cvtps_epi32(v);                   \
            }                                                                           \
            __m128i a = _mm_add_epi16(_mm_packs_epi32(q[0], q[1]), zp);                 \
            __m128i b = _mm_add_epi16(_mm_packs_epi32(q[2], q[3]), zp);                 \
            _mm_storeu_si128((__m128i *)(d + i), PACK16(a, b));                          \
        }                                                                               \
        const int32_t z = (int32_t)p->zp;                                               \
        for (; i < n; i++)                                                              \
            d[i] = (DT)(quant_small(s[i], p->scale, p->lo_f, p->hi_f, TZ, 0) + z);      \
    }
QUANT_KERNEL_SSE2(k_f32_u8_rne, uint8_t, 0, 0, _mm_packus_epi16)
QUANT_KERNEL_SSE2(k_f32_u8_tz, uint8_t, 1, 0, _mm_packus_epi16)
QUANT_KERNEL_SSE2(k_f32_i8_rne, int8_t, 0, 0, _mm_packs_epi16)
QUANT_KERNEL_SSE2(k_f32_i8_tz, int8_t, 1, 0, _mm_packs_epi16)
QUANT_KERNEL_SSE2(k_f32_u8_rne_mul, uint8_t, 0, 1, _mm_packus_epi16)
QUANT_KERNEL_SSE2(k_f32_u8_tz_mul, uint8_t, 1, 1, _mm_packus_epi16)
QUANT_KERNEL_SSE2(k_f32_i8_rne_mul, int8_t, 0, 1, _mm_packs_epi16)
QUANT_KERNEL_SSE2(k_f32_i8_tz_mul, int8_t, 1, 1, _mm_packs_epi16)
#else
QUANT_KERNEL(k_f32_u8_rne, uint8_t, 0, 0)
QUANT_KERNEL(k_f32_u8_tz, uint8_t, 1, 0)
QUANT_KERNEL(k_f32_i8_rne, int8_t, 0, 0)
QUANT_KERNEL(k_f32_i8_tz, int8_t, 1, 0)
QUANT_KERNEL(k_f32_u8_rne_mul, uint8_t, 0, 1)
QUANT_KERNEL(k_f32_u8_tz_mul, uint8_t, 1, 1)
QUANT_KERNEL(k_f32_i8_rne_mul, int8_t, 0, 1)
QUANT_KERNEL(k_f32_i8_tz_mul, int8_t, 1, 1)
#endif

#define DEQUANT_KERNEL(NAME, ST)                                                       \
    static void NAME(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {     \
        const ST *s = (const ST *)s_;                                                   \
        float *d = (float *)d_;                                                         \
        const float scale = p->scale;                                                   \
        const int32_t zp = (int32_t)p->zp;                                              \
        for (Py_ssize_t i = 0; i < n; i++) d[i] = (float)((int32_t)s[i] - zp) * scale;  \
    }
DEQUANT_KERNEL(k_u8_f32, uint8_t)
DEQUANT_KERNEL(k_i8_f32, int8_t)

static void k_f32_bf16(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {
    const float *s = (const float *)s_;
    uint16_t *d = (uint16_t *)d_;
    for (Py_ssize_t i = 0; i < n; i++) d[i] = f32_to_bf16(s[i]);
}

static void k_f32_f16(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {
    const float *s = (const float *)s_;
    uint16_t *d = (uint16_t *)d_;
    for (Py_ssize_t i = 0; i < n; i++) d[i] = f32_to_f16(s[i]);
}

static void k_bf16_f32(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {
    const uint16_t *s = (const uint16_t *)s_;
    float *d = (float *)d_;
    for (Py_ssize_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]);
}

static void k_f16_f32(const PlanObject *p, const char *s_, char *d_, Py_ssize_t n) {
    const uint16_t *s = (const uint16_t *)s_;
    float *d = (float *)d_;
    for (Py_ssize_t i = 0; i < n; i++) d[i] = f16_to_f32(s[i]);
}

/* ------------------------------------------------------------------ generic kernels */
/* Every pair: load a chunk into float32 / int64 / uint64, transform, store. */

static void load_float(int t, const char *s, float *o, Py_ssize_t n) {
    const uint16_t *h = (const uint16_t *)s;
    if (t == T_F32) memcpy(o, s, (size_t)n * 4);
    else if (t == T_F16) for (Py_ssize_t i = 0; i < n; i++) o[i] = f16_to_f32(h[i]);
    else for (Py_ssize_t i = 0; i < n; i++) o[i] = bf16_to_f32(h[i]);
}

static void store_float(int t, const float *v, char *d, Py_ssize_t n) {
    uint16_t *h = (uint16_t *)d;
    if (t == T_F32) memcpy(d, v, (size_t)n * 4);
    else if (t == T_F16) for (Py_ssize_t i = 0; i < n; i++) h[i] = f32_to_f16(v[i]);
    else for (Py_ssize_t i = 0; i < n; i++) h[i] = f32_to_bf16(v[i]);
}

#define FOR_INT_TYPES(X) \
    X(T_BOOL, uint8_t) X(T_I8, int8_t) X(T_U8, uint8_t) X(T_I16, int16_t) X(T_U16, uint16_t) \
    X(T_I32, int32_t) X(T_U32, uint32_t) X(T_I64, int64_t) X(T_U64, uint64_t)

/* Integers as double, for dequantization ((q - zp) in double is exact up to 2^53). */
static void load_int_double(int t, const char *s, double *o, Py_ssize_t n) {
    switch (t) {
#define X(T, C) case T: for (Py_ssize_t i = 0; i < n; i++) o[i] = (double)((const C *)s)[i]; break;
        FOR_INT_TYPES(X)
#undef X
    }
}

/* Integers as int64 (uint64 bit patterns too; the caller knows the source type). */
static void load_int64(int t, const char *s, int64_t *o, Py_ssize_t n) {
    switch (t) {
#define X(T, C) case T: for (Py_ssize_t i = 0; i < n; i++) o[i] = (int64_t)((const C *)s)[i]; break;
        FOR_INT_TYPES(X)
#undef X
    }
}

static int64_t int_min(int t) {
    switch (t) {
    case T_I8: return INT8_MIN; case T_I16: return INT16_MIN;
    case T_I32: return INT32_MIN; case T_I64: return INT64_MIN;
    default: return 0;
    }
}

static uint64_t int_max(int t) {
    switch (t) {
    case T_BOOL: return 1; case T_I8: return INT8_MAX; case T_U8: return UINT8_MAX;
    case T_I16: return INT16_MAX; case T_U16: return UINT16_MAX; case T_I32: return INT32_MAX;
    case T_U32: return UINT32_MAX; case T_I64: return INT64_MAX; default: return UINT64_MAX;
    }
}

/* Saturating integer store; `from_unsigned` says the int64 values are uint64 bits. */
static void store_int_sat(int t, const int64_t *v, int from_unsigned, char *d, Py_ssize_t n) {
    const int64_t lo = int_min(t);
    const uint64_t hi = int_max(t);
    switch (t) {
    case T_BOOL:
        for (Py_ssize_t i = 0; i < n; i++) ((uint8_t *)d)[i] = v[i] != 0;
        break;
#define X(T, C)                                                                        \
    case T:                                                                            \
        for (Py_ssize_t i = 0; i < n; i++) {                                           \
            int64_t x = v[i];                                                          \
            C r;                                                                       \
            if (from_unsigned) r = (C)((uint64_t)x > hi ? hi : (uint64_t)x);           \
            else if (x < lo) r = (C)lo;                                                \
            else r = (C)(x >= 0 && (uint64_t)x > hi ? hi : (uint64_t)x);               \
            ((C *)d)[i] = r;                                                           \
        }                                                                              \
        break;
    X(T_I8, int8_t) X(T_U8, uint8_t) X(T_I16, int16_t) X(T_U16, uint16_t)
    X(T_I32, int32_t) X(T_U32, uint32_t) X(T_I64, int64_t) X(T_U64, uint64_t)
#undef X
    }
}

/* Quantize float32 values into integer type t. */
static void store_quant(const PlanObject *p, const float *v, char *d, Py_ssize_t n) {
    const int t = p->dtype, tz = p->toward_zero;
    const int32_t zp = (int32_t)p->zp;
    switch (t) {
#define X(T, C)                                                                        \
    case T:                                                                            \
        for (Py_ssize_t i = 0; i < n; i++)                                             \
            ((C *)d)[i] = (C)(quant_small(v[i], p->scale, p->lo_f, p->hi_f, tz, 0) + zp); \
        return;
    X(T_I8, int8_t) X(T_U8, uint8_t) X(T_I16, int16_t) X(T_U16, uint16_t)
#undef X
    default: break;
    }
#ifdef __SIZEOF_INT128__
    /* round(x / scale) is an integer-valued double; the zero point is added in 128-bit
     * integers: in doubles, zp near 2**63 lost its low bits (fuzz_layout: float32 -> int64
     * with zp = 2**63 - 1 - 200 gave ...3760 for ...3607). */
    const __int128 lo = int_min(t), hi = (__int128)int_max(t);
    for (Py_ssize_t i = 0; i < n; i++) {
        double r = (double)(v[i] / p->scale);
        r = (r == r) ? r : 0.0;
        r = tz ? trunc(r) : nearbyint(r);
        r = r < -1e30 ? -1e30 : (r > 1e30 ? 1e30 : r); /* past any range, exact in int128 */
        __int128 q = (__int128)r + p->zp;
        q = q < lo ? lo : (q > hi ? hi : q);
        switch (t) {
        case T_I32: ((int32_t *)d)[i] = (int32_t)q; break;
        case T_U32: ((uint32_t *)d)[i] = (uint32_t)q; break;
        case T_I64: ((int64_t *)d)[i] = (int64_t)q; break;
        default: ((uint64_t *)d)[i] = (uint64_t)q; break;
        }
    }
#else
    for (Py_ssize_t i = 0; i < n; i++) { /* exact while |round(x / scale) + zp| < 2**53 */
        double q = (double)(v[i] / p->scale);
        q = (q == q) ? q : 0.0;
        q = tz ? trunc(q) : nearbyint(q);
        q += (double)p->zp;
        q = q < p->lo_d ? p->lo_d : q;
        switch (t) {
        case T_I32: ((int32_t *)d)[i] = (int32_t)(q > p->hi_d ? p->hi_d : q); break;
        case T_U32: ((uint32_t *)d)[i] = (uint32_t)(q > p->hi_d ? p->hi_d : q); break;
        case T_I64: ((int64_t *)d)[i] = q >= 9223372036854775808.0 ? INT64_MAX : (int64_t)q; break;
        default: ((uint64_t *)d)[i] = q >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)q; break;
        }
    }
#endif
}

static void k_generic(const PlanObject *p, const char *s, char *d, Py_ssize_t n) {
    union { float f[CHUNK]; int64_t i[CHUNK]; double g[CHUNK]; } buf;
    const int si = ITEMSIZE[p->stype], di = ITEMSIZE[p->dtype];
    for (Py_ssize_t at = 0; at < n; at += CHUNK) {
        Py_ssize_t m = (n - at < CHUNK) ? n - at : CHUNK;
        const char *sp = s + at * si;
        char *dp = d + at * di;
        switch (p->op) {
        case OP_FCAST:
            load_float(p->stype, sp, buf.f, m);
            store_float(p->dtype, buf.f, dp, m);
            break;
        case OP_QUANT:
            load_float(p->stype, sp, buf.f, m);
            store_quant(p, buf.f, dp, m);
            break;
        case OP_DEQUANT:
            load_int_double(p->stype, sp, buf.g, m);
            for (Py_ssize_t i = 0; i < m; i++)
                buf.f[i] = (float)(buf.g[i] - (double)p->zp) * p->scale;
            store_float(p->dtype, buf.f, dp, m);
            break;
        case OP_FTOBOOL:
            load_float(p->stype, sp, buf.f, m);
            for (Py_ssize_t i = 0; i < m; i++) ((uint8_t *)dp)[i] = buf.f[i] != 0.0f;
            break;
        case OP_ICAST:
            load_int64(p->stype, sp, buf.i, m);
            store_int_sat(p->dtype, buf.i, p->stype == T_U64, dp, m);
            break;
        default:
            memcpy(dp, sp, (size_t)(m * si));
            break;
        }
    }
}

static kernel_fn pick_kernel(int op, int st, int dt, int tz, int mul) {
    if (op == OP_COPY) return k_copy;
    if (op == OP_QUANT && st == T_F32 && dt == T_U8)
        return mul ? (tz ? k_f32_u8_tz_mul : k_f32_u8_rne_mul) : (tz ? k_f32_u8_tz : k_f32_u8_rne);
    if (op == OP_QUANT && st == T_F32 && dt == T_I8)
        return mul ? (tz ? k_f32_i8_tz_mul : k_f32_i8_rne_mul) : (tz ? k_f32_i8_tz : k_f32_i8_rne);
    if (op == OP_DEQUANT && st == T_U8 && dt == T_F32) return k_u8_f32;
    if (op == OP_DEQUANT && st == T_I8 && dt == T_F32) return k_i8_f32;
    if (op == OP_FCAST && st == T_F32 && dt == T_BF16) return k_f32_bf16;
    if (op == OP_FCAST && st == T_F32 && dt == T_F16) return k_f32_f16;
    if (op == OP_FCAST && st == T_BF16 && dt == T_F32) return k_bf16_f32;
    if (op == OP_FCAST && st == T_F16 && dt == T_F32) return k_f16_f32;
    return k_generic;
}

/* ------------------------------------------------------------------ the loop nest */

/* Strided element moves of `size` bytes; memcpy keeps them alignment-safe. */
#define MOVE_LOOP(C, SRC, SS, DST, DS, N)                                              \
    for (Py_ssize_t i = 0; i < (N); i++) {                                             \
        C v;                                                                           \
        memcpy(&v, (SRC) + i * (SS), sizeof(C));                                       \
        memcpy((DST) + i * (DS), &v, sizeof(C));                                       \
    }

static void move(const char *s, Py_ssize_t ss, char *d, Py_ssize_t ds, int size, Py_ssize_t n) {
    switch (size) {
    case 1: MOVE_LOOP(uint8_t, s, ss, d, ds, n) break;
    case 2: MOVE_LOOP(uint16_t, s, ss, d, ds, n) break;
    case 4: MOVE_LOOP(uint32_t, s, ss, d, ds, n) break;
    default: MOVE_LOOP(uint64_t, s, ss, d, ds, n) break;
    }
}

/* Gather (GATHER=1) from / scatter (0) to a stride of K items, K a compile-time constant so
 * the interleave / de-interleave of 2-16 channels vectorises. Needs aligned pointers. */
#define STRIDED_FIXED(C, K)                                                            \
    static void gather_##C##_##K(const char *s, char *d, Py_ssize_t n) {               \
        const C *sp = (const C *)s;                                                    \
        C *dp = (C *)d;                                                                \
        for (Py_ssize_t i = 0; i < n; i++) dp[i] = sp[i * K];                          \
    }                                                                                  \
    static void scatter_##C##_##K(const char *s, char *d, Py_ssize_t n) {              \
        const C *sp = (const C *)s;                                                    \
        C *dp = (C *)d;                                                                \
        for (Py_ssize_t i = 0; i < n; i++) dp[i * K] = sp[i];                          \
    }
#define STRIDED_ALL(C) STRIDED_FIXED(C, 2) STRIDED_FIXED(C, 3) STRIDED_FIXED(C, 4) \
    STRIDED_FIXED(C, 8) STRIDED_FIXED(C, 16)
STRIDED_ALL(uint8_t)
STRIDED_ALL(uint16_t)
STRIDED_ALL(uint32_t)

typedef void (*strided_fn)(const char *s, char *d, Py_ssize_t n);
/* Measured on x86-64 (SSE2): gcc's code for the stride-3 gathers of 1- and 4-byte items
 * and for byte scatters is slower than the plain loop in move(), so those stay NULL. */
#define G(C, K) gather_##C##_##K
#define S(C, K) scatter_##C##_##K
static const strided_fn GATHER[3][17] = {
    {NULL, NULL, G(uint8_t, 2), NULL, G(uint8_t, 4), [8] = G(uint8_t, 8), [16] = G(uint8_t, 16)},
    {NULL, NULL, G(uint16_t, 2), G(uint16_t, 3), G(uint16_t, 4), [8] = G(uint16_t, 8),
     [16] = G(uint16_t, 16)},
    {NULL, NULL, G(uint32_t, 2), NULL, G(uint32_t, 4), [8] = G(uint32_t, 8),
     [16] = G(uint32_t, 16)},
};
static const strided_fn SCATTER[3][17] = {
    {NULL},
    {NULL, NULL, S(uint16_t, 2), S(uint16_t, 3), S(uint16_t, 4), [8] = S(uint16_t, 8),
     [16] = S(uint16_t, 16)},
    {NULL, NULL, S(uint32_t, 2), S(uint32_t, 3), S(uint32_t, 4), [8] = S(uint32_t, 8),
     [16] = S(uint32_t, 16)},
};
#undef G
#undef S

/* The fixed-stride function for a stride of `stride` bytes over `size`-byte items, or NULL. */
static strided_fn fixed_stride(const strided_fn table[3][17], Py_ssize_t stride, int size) {
    int row = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : -1;
    if (row < 0 || stride % size) return NULL;
    Py_ssize_t k = stride / size;
    return (k >= 0 && k <= 16) ? table[row][k] : NULL;
}

static void gather(int aligned, const char *s, Py_ssize_t ss, char *buf, int size, Py_ssize_t n) {
    strided_fn f = aligned ? fixed_stride(GATHER, ss, size) : NULL;
    if (f) f(s, buf, n);
    else move(s, ss, buf, size, size, n);
}

static void scatter(int aligned, const char *buf, char *d, Py_ssize_t ds, int size, Py_ssize_t n) {
    strided_fn f = aligned ? fixed_stride(SCATTER, ds, size) : NULL;
    if (f) f(buf, d, n);
    else move(buf, size, d, ds, size, n);
}

/* `n` copies of the pad value at a stride of `ds` bytes. */
static void fill_row(const PlanObject *p, char *d, Py_ssize_t ds, Py_ssize_t n) {
    switch (ITEMSIZE[p->dtype]) {
    case 1: MOVE_LOOP(uint8_t, (const char *)p->pad, 0, d, ds, n) break;
    case 2: MOVE_LOOP(uint16_t, (const char *)p->pad, 0, d, ds, n) break;
    case 4: MOVE_LOOP(uint32_t, (const char *)p->pad, 0, d, ds, n) break;
    default: MOVE_LOOP(uint64_t, (const char *)p->pad, 0, d, ds, n) break;
    }
}

typedef struct {
    const PlanObject *p;
    int aligned;  /* base addresses and strides are multiples of the item sizes */
} Walk;

static void row(const Walk *w, const char *src, Py_ssize_t ss, char *dst, Py_ssize_t ds,
                Py_ssize_t n) {
    const PlanObject *p = w->p;
    const int si = ITEMSIZE[p->stype], di = ITEMSIZE[p->dtype];
    if (w->aligned && ss == si && ds == di) {
        p->kernel(p, src, dst, n);
        return;
    }
    if (p->op == OP_COPY) {
        if (w->aligned && ss == si) scatter(1, src, dst, ds, si, n);
        else if (w->aligned && ds == di) gather(1, src, ss, dst, si, n);
        else move(src, ss, dst, ds, si, n);
        return;
    }
    union { double align; char b[CHUNK * 8]; } sbuf, dbuf;
    for (Py_ssize_t at = 0; at < n; at += CHUNK) {
        Py_ssize_t m = (n - at < CHUNK) ? n - at : CHUNK;
        const char *sp = src + at * ss;
        char *dp = dst + at * ds;
        int direct_s = w->aligned && ss == si, direct_d = w->aligned && ds == di;
        if (!direct_s) gather(w->aligned, sp, ss, sbuf.b, si, m);
        p->kernel(p, direct_s ? sp : sbuf.b, direct_d ? dp : dbuf.b, m);
        if (!direct_d) scatter(w->aligned, dbuf.b, dp, ds, di, m);
    }
}

static void fill(const PlanObject *p, int lvl, char *dst) {
    const Py_ssize_t n = p->shape[lvl], ds = p->dstr[lvl];
    if (lvl == p->ndim - 1) {
        fill_row(p, dst, ds, n);
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) fill(p, lvl + 1, dst + i * ds);
}

/* Interleave K rows of CHUNK-strided items into K-item pixels (the channels-last store of
 * planar rows), K a compile-time constant so the loop vectorises. */
#define INTERLEAVE(C, K)                                                               \
    static void interleave_##C##_##K(const char *rows, char *d, Py_ssize_t m) {        \
        const C *r = (const C *)rows;                                                  \
        C *o = (C *)d;                                                                 \
        for (Py_ssize_t i = 0; i < m; i++)                                             \
            for (int k = 0; k < K; k++) o[i * K + k] = r[k * CHUNK + i];                \
    }
INTERLEAVE(uint8_t, 2) INTERLEAVE(uint8_t, 3)
INTERLEAVE(uint16_t, 2) INTERLEAVE(uint16_t, 3) INTERLEAVE(uint16_t, 4)
INTERLEAVE(uint32_t, 2) INTERLEAVE(uint32_t, 3) INTERLEAVE(uint32_t, 4)

/* Four byte rows -> 32-bit pixels: shifts and ors vectorise better than byte shuffles. */
static void interleave_uint8_t_4(const char *rows, char *d, Py_ssize_t m) {
    const uint8_t *r = (const uint8_t *)rows;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* memcpy: a uint8 destination is only byte-aligned (UBSan's misaligned store, found by
     * fuzz_layout); compilers still emit one vector store per 4-16 pixels. */
    for (Py_ssize_t i = 0; i < m; i++) {
        uint32_t px = (uint32_t)r[i] | (uint32_t)r[CHUNK + i] << 8 |
                      (uint32_t)r[2 * CHUNK + i] << 16 | (uint32_t)r[3 * CHUNK + i] << 24;
        memcpy(d + 4 * i, &px, 4);
    }
#else
    for (Py_ssize_t i = 0; i < m; i++)
        for (int k = 0; k < 4; k++) ((uint8_t *)d)[i * 4 + k] = r[k * CHUNK + i];
#endif
}

static strided_fn interleaver(int size, Py_ssize_t k) {
    static const strided_fn table[3][3] = {
        {interleave_uint8_t_2, interleave_uint8_t_3, interleave_uint8_t_4},
        {interleave_uint16_t_2, interleave_uint16_t_3, interleave_uint16_t_4},
        {interleave_uint32_t_2, interleave_uint32_t_3, interleave_uint32_t_4},
    };
    int row = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : -1;
    return (row < 0 || k < 2 || k > 4) ? NULL : table[row][k - 2];
}

/* ------------------------------------------- float32 planes -> quantized 4-byte pixels
 *
 * The flagship conversion (a float32 NCHW frame -> RGBX-like uint8/int8 NHWC4, issue 21)
 * in one pass: load up to four channel rows, scale, clamp, round, add the zero point and
 * OR the bytes into 32-bit pixels; the channels past `valid` hold the pad byte. Same
 * results as quant_small: NaN -> 0 before the clamp, cvtps2dq rounds to nearest even under
 * the default MXCSR mode (cvttps2dq toward zero), values clamped to [lo, hi] are exact.
 * Picked at run time: AVX2 where the CPU has it (8 pixels a step), else SSE2 (4), the
 * x86-64 baseline; other CPUs take the scalar loop. */
typedef void (*pixels_fn)(const PlanObject *p, const float *const *rows, int valid,
                          char *dst, Py_ssize_t n);

static uint32_t pixel_scalar(const PlanObject *p, const float *const *rows, int valid,
                             Py_ssize_t i) {
    const float scale = p->exact_inv ? p->inv : p->scale;
    uint32_t px = 0;
    for (int c = 0; c < 4; c++) {
        uint32_t b = p->pad[0];
        if (c < valid)
            b = (uint32_t)(quant_small(rows[c][i], scale, p->lo_f, p->hi_f, p->toward_zero,
                                       p->exact_inv) + (int32_t)p->zp) & 0xffu;
        px |= b << (8 * c);
    }
    return px;
}

static void pixels_scalar(const PlanObject *p, const float *const *rows, int valid, char *dst,
                          Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t px = pixel_scalar(p, rows, valid, i);
        memcpy(dst + 4 * i, &px, 4); /* little-endian: channel c is byte c */
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_FUSED_PIXELS 1

#define PIXEL_CHANNEL(V, LOAD, MUL, DIV, AND, EQ, MIN, MAX, CVT, CVTT, ADD, AND_I, SLL, OR, c) \
    if (c < valid) {                                                                          \
        V v = LOAD(rows[c] + i);                                                              \
        v = mul ? MUL(v, vs) : DIV(v, vs);                                                    \
        v = AND(v, EQ(v, v));                                                                 \
        v = MIN(MAX(v, lo), hi);                                                              \
        acc = OR(acc, SLL(AND_I(ADD(tz ? CVTT(v) : CVT(v), zp), mask), 8 * c));               \
    }

__attribute__((target("avx2"))) static void pixels_avx2(const PlanObject *p,
                                                        const float *const *rows, int valid,
                                                        char *dst, Py_ssize_t n) {
    const int mul = p->exact_inv, tz = p->toward_zero;
    const __m256 vs = _mm256_set1_ps(mul ? p->inv : p->scale);
    const __m256 lo = _mm256_set1_ps(p->lo_f), hi = _mm256_set1_ps(p->hi_f);
    const __m256i zp = _mm256_set1_epi32((int32_t)p->zp), mask = _mm256_set1_epi32(0xff);
    uint32_t pad = 0;
    for (int c = valid; c < 4; c++) pad |= (uint32_t)p->pad[0] << (8 * c);
    const __m256i vpad = _mm256_set1_epi32((int32_t)pad);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i acc = vpad;
#define CH(c) PIXEL_CHANNEL(__m256, _mm256_loadu_ps, _mm256_mul_ps, _mm256_div_ps,          \
                            _mm256_and_ps, EQ256, _mm256_min_ps, _mm256_max_ps,                 \
                            _mm256_cvtps_epi32, _mm256_cvttps_epi32, _mm256_add_epi32,          \
                            _mm256_and_si256, _mm256_slli_epi32, _mm256_or_si256, c)
#define EQ256(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
        CH(0) CH(1) CH(2) CH(3)
#undef CH
#undef EQ256
        _mm256_storeu_si256((__m256i *)(dst + 4 * i), acc);
    }
    for (; i < n; i++) {
        uint32_t px = pixel_scalar(p, rows, valid, i);
        memcpy(dst + 4 * i, &px, 4);
    }
}

static void pixels_sse2(const PlanObject *p, const float *const *rows, int valid, char *dst,
                        Py_ssize_t n) {
    const int mul = p->exact_inv, tz = p->toward_zero;
    const __m128 vs = _mm_set1_ps(mul ? p->inv : p->scale);
    const __m128 lo = _mm_set1_ps(p->lo_f), hi = _mm_set1_ps(p->hi_f);
    const __m128i zp = _mm_set1_epi32((int32_t)p->zp), mask = _mm_set1_epi32(0xff);
    uint32_t pad = 0;
    for (int c = valid; c < 4; c++) pad |= (uint32_t)p->pad[0] << (8 * c);
    const __m128i vpad = _mm_set1_epi32((int32_t)pad);
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m128i acc = vpad;
#define CH(c) PIXEL_CHANNEL(__m128, _mm_loadu_ps, _mm_mul_ps, _mm_div_ps, _mm_and_ps,          \
                            _mm_cmpeq_ps, _mm_min_ps, _mm_max_ps, _mm_cvtps_epi32,              \
                            _mm_cvttps_epi32, _mm_add_epi32, _mm_and_si128, _mm_slli_epi32,     \
                            _mm_or_si128, c)
        CH(0) CH(1) CH(2) CH(3)
#undef CH
        _mm_storeu_si128((__m128i *)(dst + 4 * i), acc);
    }
    for (; i < n; i++) {
        uint32_t px = pixel_scalar(p, rows, valid, i);
        memcpy(dst + 4 * i, &px, 4);
    }
}
#undef PIXEL_CHANNEL
#endif

static pixels_fn PIXELS = pixels_scalar; /* set once in PyInit__kernels */

static void pick_pixels(void) {
#ifdef HAVE_FUSED_PIXELS
    __builtin_cpu_init();
    PIXELS = __builtin_cpu_supports("avx2") ? pixels_avx2 : pixels_sse2;
    if (getenv("COPYLESS_KERNELS_NO_AVX2")) PIXELS = pixels_sse2; /* to test the SSE2 path */
#endif
}

/* The last two levels as [4 channels, n pixels] of float32 planes with contiguous rows
 * (plan_init's fused_pixels conditions): one pass, no stack rows. */
static void fused_rows(const Walk *w, const char *src, char *dst, Py_ssize_t valid) {
    const PlanObject *p = w->p;
    const Py_ssize_t ssk = p->sstr[p->ndim - 2], n = p->shape[p->ndim - 1];
    const float *rows[4] = {NULL, NULL, NULL, NULL};
    for (Py_ssize_t c = 0; c < valid; c++) rows[c] = (const float *)(src + c * ssk);
    PIXELS(p, rows, (int)valid, dst, n);
}

/* The last two levels when they are [K channels, n pixels] of a channels-last destination:
 * convert each channel's row into a stack row, then interleave whole pixels. */
static void interleave_rows(const Walk *w, const char *src, char *dst, Py_ssize_t valid) {
    const PlanObject *p = w->p;
    const int kl = p->ndim - 2, nl = p->ndim - 1, di = ITEMSIZE[p->dtype];
    const Py_ssize_t k = p->shape[kl], n = p->shape[nl], ssk = p->sstr[kl], ssn = p->sstr[nl];
    union { double align; char b[4 * CHUNK * 4]; } rows;
    for (Py_ssize_t at = 0; at < n; at += CHUNK) {
        Py_ssize_t m = (n - at < CHUNK) ? n - at : CHUNK;
        for (Py_ssize_t c = 0; c < k; c++) {
            char *r = rows.b + c * CHUNK * di;
            if (c < valid) row(w, src + c * ssk + at * ssn, ssn, r, di, m);
            else fill_row(p, r, di, m);
        }
        p->interleave(rows.b, dst + at * k * di, m);
    }
}

static void walk(const Walk *w, int lvl, const char *src, char *dst, Py_ssize_t cb) {
    const PlanObject *p = w->p;
    const Py_ssize_t n = p->shape[lvl], ss = p->sstr[lvl], ds = p->dstr[lvl];
    Py_ssize_t valid = n;
    if (lvl == p->pad_dim) {
        valid = p->channels - cb * p->group;
        valid = valid < 0 ? 0 : (valid > n ? n : valid);
    }
    if (lvl == p->ndim - 2 && p->fused_pixels && w->aligned) {
        fused_rows(w, src, dst, valid);
        return;
    }
    if (lvl == p->ndim - 2 && p->interleave && w->aligned) {
        interleave_rows(w, src, dst, valid);
        return;
    }
    if (lvl == p->ndim - 1) {
        row(w, src, ss, dst, ds, valid);
    } else {
        for (Py_ssize_t i = 0; i < valid; i++)
            walk(w, lvl + 1, src + i * ss, dst + i * ds, lvl == p->cb_dim ? i : cb);
    }
    if (p->pad_mode == PAD_FILL && valid < n) {
        if (lvl == p->ndim - 1) {
            fill_row(p, dst + valid * ds, ds, n - valid);
        } else {
            for (Py_ssize_t i = valid; i < n; i++) fill(p, lvl + 1, dst + i * ds);
        }
    }
}

/* ------------------------------------------------------------------ the Plan type */

static int read_dims(PyObject *seq, Py_ssize_t *out, int ndim, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != ndim) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: expected %d values", what, ndim);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
    }
    Py_DECREF(fast);
    return 0;
}

/* ------------------------------------------------------------ validating a plan
 *
 * Python (copyless/layout/plan.py: Plan._build_kernel over nest.build_nest and
 * plan.element_rule) only builds consistent plans, but nothing here relies on it: every
 * parameter is checked against what the walk above assumes, and the bytes the walk can
 * touch are bounded by src_nbytes / dst_nbytes, which run() checks against the buffers. A
 * wrong plan is a ValueError, never an access outside the buffers.
 */

/* Which (op, source type, destination type) triples the kernels implement; the Python
 * side's rules are plan.element_rule. */
static int op_fits(int op, int st, int dt) {
    const int sf = st == T_F32 || st == T_F16 || st == T_BF16;
    const int df = dt == T_F32 || dt == T_F16 || dt == T_BF16;
    switch (op) {
    case OP_COPY: return st == dt;
    case OP_FCAST: return sf && df;
    case OP_QUANT: return sf && !df && dt != T_BOOL;   /* store_quant: integer targets */
    case OP_DEQUANT: return !sf && df;                  /* bool -> float is (q - 0) * 1 */
    case OP_ICAST: return !sf && !df;
    case OP_FTOBOOL: return sf && dt == T_BOOL;
    default: return 0;
    }
}

/* The zero point fits the integer side (element_rule checks it against np.iinfo). */
static int zp_fits(int t, int64_t zp) {
    if (zp < int_min(t)) return 0;
    return zp < 0 || (uint64_t)zp <= int_max(t);
}

/* a * b + c into *out without overflow (all >= 0); 0 on overflow. */
static int mul_add(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t *out) {
    Py_ssize_t m;
    return !__builtin_mul_overflow(a, b, &m) && !__builtin_add_overflow(m, c, out);
}

/* Valid positions of the pad dim under block index cb (walk() clips the same way). */
static Py_ssize_t valid_at(const PlanObject *p, Py_ssize_t cb) {
    Py_ssize_t v = p->channels - cb * p->group; /* cb * group checked in plan_check */
    Py_ssize_t n = p->shape[p->pad_dim];
    return v < 0 ? 0 : (v > n ? n : v);
}

/* One past the last byte walk() touches through `str` (source or destination strides);
 * `all_pad` when every pad position is visited (a filled destination). -1 on overflow. */
static Py_ssize_t reach(const PlanObject *p, const Py_ssize_t *str, int itemsize, int all_pad) {
    if (p->elements == 0) return 0;
    const int pad = p->pad_dim >= 0, joint = pad && !all_pad;
    Py_ssize_t last = 0;
    for (int i = 0; i < p->ndim; i++) {
        if (joint && (i == p->pad_dim || i == p->cb_dim)) continue;
        if (!mul_add(p->shape[i] - 1, str[i], last, &last)) return -1;
    }
    if (joint) { /* the furthest (block, pad) position with a real channel */
        Py_ssize_t best = -1, blocks = p->cb_dim >= 0 ? p->shape[p->cb_dim] : 1;
        /* walk() forms the pointer of every block, with or without a real channel: a
         * stride of 2**62 past the last real block overflowed (fuzz_layout, UBSan). */
        if (p->cb_dim >= 0 && !mul_add(blocks - 1, str[p->cb_dim], 0, &best)) return -1;
        for (Py_ssize_t cb = 0; cb < blocks; cb++) {
            Py_ssize_t v = valid_at(p, cb), at;
            if (v < 1) continue;
            if (!mul_add(v - 1, str[p->pad_dim], 0, &at)) return -1;
            if (p->cb_dim >= 0 && !mul_add(cb, str[p->cb_dim], at, &at)) return -1;
            if (at > best) best = at;
        }
        if (best < 0) return 0; /* no real channel: nothing read (a filled dst is all_pad) */
        if (__builtin_add_overflow(last, best, &last)) return -1;
    }
    return __builtin_add_overflow(last, (Py_ssize_t)itemsize, &last) ? -1 : last;
}

static const char *plan_check(PlanObject *p, double scale) {
    if (p->stype < 0 || p->stype >= T_COUNT || p->dtype < 0 || p->dtype >= T_COUNT)
        return "unknown element type";
    if (p->op < 0 || p->op >= OP_COUNT || !op_fits(p->op, p->stype, p->dtype))
        return "operation does not fit the element types";
    if (p->op == OP_QUANT || p->op == OP_DEQUANT) {
        /* element_rule / QuantParameters: a positive scale, finite as float32 */
        if (!(scale > 0.0 && scale <= FLT_MAX) || (float)scale == 0.0f)
            return "scale must be positive and finite in float32";
        if (!zp_fits(p->op == OP_QUANT ? p->dtype : p->stype, p->zp))
            return "zero point outside the integer type";
    }
    if (p->pad_mode < PAD_NONE || p->pad_mode > PAD_SKIP || p->group < 1 || p->channels < 0)
        return "bad channel padding";
    /* nest.build_nest: a pad dim exactly when padding; its block dim (if any) outside it */
    if ((p->pad_mode == PAD_NONE) != (p->pad_dim == -1) || p->pad_dim < -1 ||
        p->pad_dim >= p->ndim || p->cb_dim < -1 || p->cb_dim >= p->ndim ||
        (p->pad_dim >= 0 && p->cb_dim >= p->pad_dim))
        return "bad pad / block dims";
    if (p->pad_dim < 0) p->cb_dim = -1; /* no padding: the block index is never read */
    Py_ssize_t product;
    if (p->cb_dim >= 0 && !mul_add(p->shape[p->cb_dim], p->group, 0, &product))
        return "block count overflows";
    if (p->src_nbytes < 0 || p->dst_nbytes < 0) return "negative byte size";
    Py_ssize_t elements = 1;
    for (int i = 0; i < p->ndim; i++) {
        if (p->shape[i] < 0 || p->sstr[i] < 0 || p->dstr[i] < 0)
            return "negative extent or stride";
        if (__builtin_mul_overflow(elements, p->shape[i], &elements)) return "too many elements";
    }
    p->elements = elements;
    Py_ssize_t s_reach = reach(p, p->sstr, ITEMSIZE[p->stype], 0);
    Py_ssize_t d_reach = reach(p, p->dstr, ITEMSIZE[p->dtype], p->pad_mode == PAD_FILL);
    if (s_reach < 0 || d_reach < 0) return "strides overflow";
    if (s_reach > p->src_nbytes || d_reach > p->dst_nbytes)
        return "the strides reach past src_nbytes / dst_nbytes";
    return NULL;
}

static int plan_init(PlanObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"shape", "src_strides", "dst_strides", "src_type", "dst_type",
                             "op", "scale", "zero_point", "toward_zero", "pad_dim", "cb_dim",
                             "pad_mode", "group", "channels", "pad_value", "src_nbytes",
                             "dst_nbytes", NULL};
    PyObject *shape, *sstr, *dstr;
    double scale;
    long long zp;
    const char *pad;
    Py_ssize_t pad_len;
    self->kernel = NULL; /* run() refuses a plan whose init failed */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOiiidLpiiinny#nn", kwlist, &shape, &sstr,
                                     &dstr, &self->stype, &self->dtype, &self->op, &scale, &zp,
                                     &self->toward_zero, &self->pad_dim, &self->cb_dim,
                                     &self->pad_mode, &self->group, &self->channels, &pad,
                                     &pad_len, &self->src_nbytes, &self->dst_nbytes))
        return -1;
    Py_ssize_t ndim = PySequence_Size(shape);
    if (ndim < 1 || ndim > MAXD) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "1 to %d dims, got %zd", MAXD, ndim);
        return -1;
    }
    self->ndim = (int)ndim;
    if (read_dims(shape, self->shape, self->ndim, "shape") ||
        read_dims(sstr, self->sstr, self->ndim, "src_strides") ||
        read_dims(dstr, self->dstr, self->ndim, "dst_strides"))
        return -1;
    self->zp = zp;
    const char *why = plan_check(self, scale);
    if (why == NULL && pad_len != ITEMSIZE[self->dtype]) why = "pad_value is not one item";
    if (why != NULL) {
        PyErr_Format(PyExc_ValueError, "inconsistent plan parameters: %s", why);
        return -1;
    }
    self->scale = (float)scale; /* in float32 range: plan_check (or unused: scale 1 ops) */
    if (self->op != OP_QUANT && self->op != OP_DEQUANT) self->scale = 1.0f;
    self->lo_f = (float)((double)int_min(self->dtype) - (double)zp);
    self->hi_f = (float)((double)int_max(self->dtype) - (double)zp);
    self->lo_d = (double)int_min(self->dtype);
    self->hi_d = (double)int_max(self->dtype);
    memset(self->pad, 0, sizeof self->pad);
    memcpy(self->pad, pad, (size_t)pad_len);
    const int si = ITEMSIZE[self->stype], di = ITEMSIZE[self->dtype];
    self->strides_aligned = 1;
    for (int i = 0; i < self->ndim; i++)
        if (self->sstr[i] % si || self->dstr[i] % di) self->strides_aligned = 0;
    int exponent;
    double mantissa = frexp((double)self->scale, &exponent);
    self->inv = (float)(1.0 / (double)self->scale);
    self->exact_inv = mantissa == 0.5 && isnormal(self->inv) && isnormal(self->scale);
    self->interleave = NULL;
    /* interleave_rows() reads whole rows of the last dim: never when that dim is clipped
     * (the pad dim) or when the block index would change inside the last two dims. */
    const int kl = self->ndim - 2, nl = self->ndim - 1;
    Py_ssize_t pixel;
    if (self->ndim >= 2 && self->pad_mode != PAD_SKIP && self->pad_dim != nl &&
        self->cb_dim < kl && self->dstr[kl] == di &&
        mul_add(self->shape[kl], di, 0, &pixel) && self->dstr[nl] == pixel)
        self->interleave = interleaver(di, self->shape[kl]);
    self->kernel = pick_kernel(self->op, self->stype, self->dtype, self->toward_zero,
                               self->exact_inv);
    /* fused_rows(): float32 -> 8-bit quantization into 4-channel pixels whose channel rows
     * are contiguous; the pad dim (if any) is the channel dim, so `valid` <= 4. */
    self->fused_pixels = self->interleave != NULL && self->op == OP_QUANT &&
                         self->stype == T_F32 && (self->dtype == T_U8 || self->dtype == T_I8) &&
                         self->shape[kl] == 4 && self->sstr[nl] == 4;
    return 0;
}

/* run(src, dst). Checked here: both export a C-contiguous buffer (PyBUF_SIMPLE), dst is
 * writable, each is at least src_nbytes / dst_nbytes long (which plan_check proved the walk
 * stays within), and they do not overlap. Python (plan.Plan.run) adds one rule C cannot
 * see: a typed numpy array must have the view's shape and dtype, else be flat uint8, so an
 * array of another meaning is never reinterpreted as the view's bytes. */
static PyObject *plan_run(PlanObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(src, dst) takes 2 buffers");
        return NULL;
    }
    Py_buffer sb, db;
    if (PyObject_GetBuffer(args[0], &sb, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &db, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    PyObject *result = NULL;
    const char *s = (const char *)sb.buf;
    if (self->kernel == NULL) {
        PyErr_SetString(PyExc_ValueError, "the plan was not initialised");
        PyBuffer_Release(&sb);
        PyBuffer_Release(&db);
        return NULL;
    }
    char *d = (char *)db.buf;
    if (sb.len < self->src_nbytes || db.len < self->dst_nbytes) {
        PyErr_Format(PyExc_ValueError, "buffers of %zd / %zd bytes, the views need %zd / %zd",
                     sb.len, db.len, self->src_nbytes, self->dst_nbytes);
    } else if (self->elements > 0 && s < d + self->dst_nbytes && d < s + self->src_nbytes) {
        PyErr_SetString(PyExc_ValueError, "source and destination memory overlap");
    } else {
        Walk w = {self, self->strides_aligned && ((uintptr_t)s % ITEMSIZE[self->stype]) == 0 &&
                            ((uintptr_t)d % ITEMSIZE[self->dtype]) == 0};
        if (self->elements >= NOGIL_ELEMENTS) {
            Py_BEGIN_ALLOW_THREADS
            walk(&w, 0, s, d, 0);
            Py_END_ALLOW_THREADS
        } else if (self->elements > 0) {
            walk(&w, 0, s, d, 0);
        }
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    return result;
}

static PyMethodDef plan_methods[] = {
    {"run", (PyCFunction)(void (*)(void))plan_run, METH_FASTCALL,
     "run(src, dst): convert src's bytes into dst's (C-contiguous buffers). No copy besides "
     "the conversion itself; the GIL is released for large tensors."},
    {NULL, NULL, 0, NULL},
};

static PyObject *plan_get_kernel(PlanObject *self, void *closure) {
    if (self->kernel == NULL) return PyUnicode_FromString("none");
    if (self->fused_pixels) return PyUnicode_FromString("fused pixels");
    return PyUnicode_FromString(self->kernel == k_generic ? "generic"
                                : self->kernel == k_copy  ? "copy"
                                                          : "specialised");
}

static PyGetSetDef plan_getset[] = {
    {"kernel", (getter)plan_get_kernel, NULL, "Which inner kernel the plan uses.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "copyless.layout._kernels.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated loop nest converting one view's bytes into another's.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)plan_init,
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
};

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT, "_kernels", "Fused layout/dtype conversion kernels.", -1, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    pick_pixels();
    if (PyType_Ready(&PlanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&kernels_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAXD", MAXD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
