/* One pass over a contiguous float32 buffer: Max, Min, sum and sum of squares (msprobe's statistics).
 *
 * The dump measures every tensor it records; torch needs three or four passes over memory for these
 * numbers (aminmax, sum, dot or vector_norm), each bound by memory bandwidth on big tensors. This
 * reads the data once. Sums are accumulated in double (several independent lanes), so the mean and the
 * norm are at least as exact as torch's float32 reductions. Max/Min follow torch: any NaN makes both NaN.
 *
 * AVX2+FMA on x86-64 CPUs that have it (sums in float32 lanes over blocks of 256 values, then in double),
 * a portable scalar loop elsewhere. The module is optional: msprobe falls back to numpy/torch without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>

typedef struct {
    double mx, mn, sum, sq;
    int nan;
} fstats_t;

/* The portable loop: scalar, several independent double accumulators. */
static void fstats_scalar(const float *p, Py_ssize_t n, fstats_t *out) {
    double mx = -INFINITY, mn = INFINITY;
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int nan = 0;
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; k++) {
            double x = p[i + k];
            if (x != x) {
                nan = 1;
                continue;
            }
            if (x > mx) mx = x;
            if (x < mn) mn = x;
            s[k] += x;
            q[k] += x * x;
        }
    }
    for (; i < n; i++) {
        double x = p[i];
        if (x != x) {
            nan = 1;
            continue;
        }
        if (x > mx) mx = x;
        if (x < mn) mn = x;
        s[0] += x;
        q[0] += x * x;
    }
    out->mx = mx;
    out->mn = mn;
    out->sum = (s[0] + s[1]) + (s[2] + s[3]);
    out->sq = (q[0] + q[1]) + (q[2] + q[3]);
    out->nan = nan;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MSP_HAVE_AVX2 1
#define MSP_BLOCK 256   /* floats summed in float32 lanes before their sums go to double */

typedef struct {
    __m256 mx, mn, bad;
    __m256d sd, qd;
    double tmx, tmn, tsum, tsq;   /* the scalar tails */
    int tnan;
} msp_avx_state;

__attribute__((target("avx2,fma")))
static inline __m256d msp_widen_add(__m256d acc, __m256 v) {
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

__attribute__((target("avx2,fma")))
static void msp_avx_init(msp_avx_state *st) {
    st->mx = _mm256_set1_ps(-INFINITY);
    st->mn = _mm256_set1_ps(INFINITY);
    st->bad = _mm256_setzero_ps();
    st->sd = _mm256_setzero_pd();
    st->qd = _mm256_setzero_pd();
    st->tmx = -INFINITY;
    st->tmn = INFINITY;
    st->tsum = 0.0;
    st->tsq = 0.0;
    st->tnan = 0;
}

/* One contiguous run of n floats into the running state (8 lanes; a run shorter than 8 goes to the tail). */
__attribute__((target("avx2,fma")))
static void msp_avx_seg(msp_avx_state *st, const float *p, Py_ssize_t n) {
    __m256 mx = st->mx, mn = st->mn, bad = st->bad;
    __m256d sd = st->sd, qd = st->qd;
    Py_ssize_t i = 0;
    while (i + 8 <= n) {
        Py_ssize_t end = i + MSP_BLOCK <= n ? i + MSP_BLOCK : n - ((n - i) % 8);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, q0 = s0, q1 = s0;
        for (; i + 16 <= end; i += 16) {
            __m256 a = _mm256_loadu_ps(p + i), b = _mm256_loadu_ps(p + i + 8);
            mx = _mm256_max_ps(a, mx);   /* a NaN a keeps the old value; NaN is tracked in `bad` */
            mn = _mm256_min_ps(a, mn);
            mx = _mm256_max_ps(b, mx);
            mn = _mm256_min_ps(b, mn);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
            s0 = _mm256_add_ps(s0, a);
            s1 = _mm256_add_ps(s1, b);
            q0 = _mm256_fmadd_ps(a, a, q0);
            q1 = _mm256_fmadd_ps(b, b, q1);
        }
        if (i + 8 <= end) {
            __m256 a = _mm256_loadu_ps(p + i);
            mx = _mm256_max_ps(a, mx);
            mn = _mm256_min_ps(a, mn);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
            s0 = _mm256_add_ps(s0, a);
            q0 = _mm256_fmadd_ps(a, a, q0);
            i += 8;
        }
        sd = msp_widen_add(sd, _mm256_add_ps(s0, s1));
        qd = msp_widen_add(qd, _mm256_add_ps(q0, q1));
    }
    for (; i < n; i++) {
        double x = p[i];
        if (x != x) {
            st->tnan = 1;
            continue;
        }
        if (x > st->tmx) st->tmx = x;
        if (x < st->tmn) st->tmn = x;
        st->tsum += x;
        st->tsq += x * x;
    }
    st->mx = mx;
    st->mn = mn;
    st->bad = bad;
    st->sd = sd;
    st->qd = qd;
}

__attribute__((target("avx2,fma")))
static void msp_avx_finish(msp_avx_state *st, fstats_t *out) {
    float fx[8], fn[8], fb[8];
    double ds[4], dq[4];
    _mm256_storeu_ps(fx, st->mx);
    _mm256_storeu_ps(fn, st->mn);
    _mm256_storeu_ps(fb, st->bad);
    _mm256_storeu_pd(ds, st->sd);
    _mm256_storeu_pd(dq, st->qd);
    double mx = st->tmx, mn = st->tmn;
    int nan = st->tnan;
    for (int k = 0; k < 8; k++) {
        if (fx[k] > mx) mx = fx[k];
        if (fn[k] < mn) mn = fn[k];
        unsigned int bits;
        memcpy(&bits, &fb[k], sizeof(bits));
        nan |= bits != 0;
    }
    out->mx = mx;
    out->mn = mn;
    out->sum = ((ds[0] + ds[1]) + (ds[2] + ds[3])) + st->tsum;
    out->sq = ((dq[0] + dq[1]) + (dq[2] + dq[3])) + st->tsq;
    out->nan = nan;
}

__attribute__((target("avx2,fma")))
static void fstats_avx2(const float *p, Py_ssize_t n, fstats_t *out) {
    msp_avx_state st;
    msp_avx_init(&st);
    msp_avx_seg(&st, p, n);
    msp_avx_finish(&st, out);
}

__attribute__((target("avx2,fma")))
static void fstats_avx2_rows(const char *base, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                             fstats_t *out) {
    Py_ssize_t idx[64];
    msp_avx_state st;
    msp_avx_init(&st);
    for (int d = 0; d < ndim; d++) idx[d] = 0;
    for (;;) {
        Py_ssize_t off = 0;
        for (int d = 0; d < ndim - 1; d++) off += idx[d] * strides[d];
        msp_avx_seg(&st, (const float *)(base + off), shape[ndim - 1]);
        int d = ndim - 2;
        while (d >= 0) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
            d--;
        }
        if (d < 0) break;
    }
    msp_avx_finish(&st, out);
}
#endif

static int use_avx2 = -1;

static void fstats_run(const float *p, Py_ssize_t n, fstats_t *out) {
#ifdef MSP_HAVE_AVX2
    if (use_avx2 < 0) {
        __builtin_cpu_init();
        /* MSPROBE_FSTATS_PORTABLE=1: the portable loop (tests check it against the vector one) */
        use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   getenv("MSPROBE_FSTATS_PORTABLE") == NULL;
    }
    if (use_avx2) {
        fstats_avx2(p, n, out);
        return;
    }
#endif
    fstats_scalar(p, n, out);
}

static void fstats_merge(fstats_t *acc, const fstats_t *r) {
    if (r->mx > acc->mx) acc->mx = r->mx;
    if (r->mn < acc->mn) acc->mn = r->mn;
    acc->sum += r->sum;
    acc->sq += r->sq;
    acc->nan |= r->nan;
}

/* Rows of a strided float32 view whose last dimension is contiguous (a transpose of the leading
   dimensions, a slice of columns): the kernel over each row, merged. */
static void fstats_rows(const char *base, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                        fstats_t *out) {
#ifdef MSP_HAVE_AVX2
    if (use_avx2 < 0) {
        __builtin_cpu_init();
        /* MSPROBE_FSTATS_PORTABLE=1: the portable loop (tests check it against the vector one) */
        use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   getenv("MSPROBE_FSTATS_PORTABLE") == NULL;
    }
    if (use_avx2) {
        fstats_avx2_rows(base, ndim, shape, strides, out);
        return;
    }
#endif
    Py_ssize_t idx[64];
    Py_ssize_t inner = shape[ndim - 1];
    out->mx = -INFINITY;
    out->mn = INFINITY;
    out->sum = 0.0;
    out->sq = 0.0;
    out->nan = 0;
    for (int d = 0; d < ndim; d++) idx[d] = 0;
    for (;;) {
        Py_ssize_t off = 0;
        fstats_t r;
        for (int d = 0; d < ndim - 1; d++) off += idx[d] * strides[d];
        fstats_run((const float *)(base + off), inner, &r);
        fstats_merge(out, &r);
        int d = ndim - 2;
        while (d >= 0) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
            d--;
        }
        if (d < 0) break;
    }
}

static PyObject *f32_stats(PyObject *self, PyObject *arg) {
    Py_buffer view;
    fstats_t r;
    (void)self;
    if (PyObject_GetBuffer(arg, &view, PyBUF_RECORDS_RO) != 0)
        return NULL;
    Py_ssize_t n = view.itemsize ? view.len / view.itemsize : 0;
    int ok = view.itemsize == 4 && view.format != NULL && strcmp(view.format, "f") == 0 && n > 0;
    int contiguous = ok && PyBuffer_IsContiguous(&view, 'C');
    if (ok && !contiguous) {
        /* strided: the last dimension contiguous, no negative or overlapping steps */
        ok = view.ndim >= 2 && view.ndim <= 64 && view.strides != NULL && view.strides[view.ndim - 1] == 4;
        for (int d = 0; ok && d < view.ndim - 1; d++)
            ok = view.strides[d] >= 0;
    }
    if (!ok) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError,
                        "f32_stats: a non-empty float32 buffer, C-contiguous or with a contiguous last dimension");
        return NULL;
    }
    if (n >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        if (contiguous)
            fstats_run((const float *)view.buf, n, &r);
        else
            fstats_rows((const char *)view.buf, view.ndim, view.shape, view.strides, &r);
        Py_END_ALLOW_THREADS
    } else if (contiguous) {
        fstats_run((const float *)view.buf, n, &r);
    } else {
        fstats_rows((const char *)view.buf, view.ndim, view.shape, view.strides, &r);
    }
    PyBuffer_Release(&view);
    if (r.nan) {
        /* torch: any NaN makes Max, Min, the sum and the norm NaN */
        return Py_BuildValue("(dddd)", (double)NAN, (double)NAN, (double)NAN, (double)NAN);
    }
    return Py_BuildValue("(dddd)", r.mx, r.mn, r.sum, r.sq);
}

static PyMethodDef methods[] = {
    {"f32_stats", f32_stats, METH_O,
     "f32_stats(buffer) -> (max, min, sum, sum_of_squares) of a float32 buffer, C-contiguous or with a\n"
     "contiguous last dimension, in one pass;\n"
     "sums in double; all four NaN when any element is NaN."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "msprobe._native._fstats", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fstats(void) { return PyModule_Create(&module); }
