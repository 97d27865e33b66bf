// Fast 8-bit 4:2:0 YUV (I420, NV12) <-> BGRA conversion for the frame-ready API.
//
// GstVideoConverter takes 0.8 ms (I420 -> BGRA) and 2 ms (BGRA -> I420) per 720p frame here. These
// loops give the same results within +-1 or 2 per channel: the same matrix (Kr/Kb and range from
// the caps' colorimetry) and the same chroma resampling GStreamer uses for each case:
// - I420 -> BGRA is GStreamer's fast path, which repeats each chroma sample for 2x2 pixels;
// - NV12 -> BGRA goes through its generic path, which interpolates chroma (3:1 filters, or 1:1 for
//   horizontally cosited chroma);
// - BGRA -> I420/NV12 averages 2x2 pixels (1-2-1 horizontally for cosited chroma).
// The x86-64 build uses SSE2 (part of the baseline, so no run-time check is needed); other
// machines get the scalar loops, which compute exactly the same values.

#include "CPixelConverter.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#define PCAST_HAVE_AVX2_PATH 1
#endif

// YUV -> RGB in GStreamer's 8-bit arithmetic, so results match it: each of Y, U, V minus 128 as a
// signed byte, spread to 16 bits by repeating the byte (x * 257), times a coefficient scaled by
// 256, high 16 bits kept; the sums saturate to a signed byte and get 128 back. (That arithmetic
// does not add the limited-range luma offset exactly: white comes out 253, as in GStreamer.)
typedef struct {
    int16_t cy;         // luma, for R, G and B
    int16_t crv;        // R from V
    int16_t cgu, cgv;   // G from U and V (negative)
    int16_t cbu;        // B from U
} ToRGB;

static int16_t fixed8(double value) {
    return (int16_t)lrint(value * 256.0);
}

static ToRGB to_rgb_coefficients(double kr, double kb, int full_range) {
    double kg = 1.0 - kr - kb;
    double ys = full_range ? 1.0 : 255.0 / 219.0;
    double cs = full_range ? 1.0 : 255.0 / 224.0;
    ToRGB c;
    c.cy = fixed8(ys);
    c.crv = fixed8(2.0 * (1.0 - kr) * cs);
    c.cgu = fixed8(-2.0 * kb * (1.0 - kb) / kg * cs);
    c.cgv = fixed8(-2.0 * kr * (1.0 - kr) / kg * cs);
    c.cbu = fixed8(2.0 * (1.0 - kb) * cs);
    return c;
}

// The high 16 bits of a 16 x 16 product (_mm_mulhi_epi16).
static inline int mulhi(int a, int b) { return (a * b) >> 16; }
// A byte minus 128, as a signed byte repeated into a 16-bit word.
static inline int splat(int byte) { return (int16_t)(uint16_t)(((byte ^ 0x80) << 8) | (byte ^ 0x80)); }
static inline uint8_t clamp8(int value) { return value < 0 ? 0 : value > 255 ? 255 : (uint8_t)value; }
static inline int saturate_signed8(int value) { return value < -128 ? -128 : value > 127 ? 127 : value; }

static inline void pixel_to_bgra(const ToRGB *c, int y, int u, int v, uint8_t *out) {
    int16_t wy = (int16_t)mulhi(splat(y), c->cy);
    int16_t wu = (int16_t)splat(u), wv = (int16_t)splat(v);
    int16_t r = (int16_t)(wy + mulhi(wv, c->crv));
    int16_t b = (int16_t)(wy + mulhi(wu, c->cbu));
    int16_t g = (int16_t)((int16_t)(wy + mulhi(wu, c->cgu)) + mulhi(wv, c->cgv));
    out[0] = (uint8_t)(saturate_signed8(b) + 128);
    out[1] = (uint8_t)(saturate_signed8(g) + 128);
    out[2] = (uint8_t)(saturate_signed8(r) + 128);
    out[3] = 255;
}

#if PCAST_HAVE_AVX2_PATH
// 32 pixels at a time with AVX2 (checked at run time); returns how many pixels it did. Unpacking
// works within 128-bit lanes, so the halves hold pixels 0-7 and 16-23, and 8-15 and 24-31; packing
// puts them back in order, and the stores pick the lanes apart.
__attribute__((target("avx2")))
static int row_to_bgra_avx2(const ToRGB *c, const uint8_t *y, const uint8_t *ue, const uint8_t *uo,
                            const uint8_t *ve, const uint8_t *vo, uint8_t *out, int width) {
    int x = 0;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i cy = _mm256_set1_epi16(c->cy), crv = _mm256_set1_epi16(c->crv);
    const __m256i cgu = _mm256_set1_epi16(c->cgu), cgv = _mm256_set1_epi16(c->cgv), cbu = _mm256_set1_epi16(c->cbu);
    const __m256i alpha = _mm256_set1_epi8((char)0xFF);
    for (; x + 32 <= width; x += 32) {
        __m256i yb = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(y + x)), flip);
        __m128i e = _mm_loadu_si128((const __m128i *)(ue + x / 2)), o = _mm_loadu_si128((const __m128i *)(uo + x / 2));
        __m256i ub = _mm256_xor_si256(_mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o)), flip);
        e = _mm_loadu_si128((const __m128i *)(ve + x / 2));
        o = _mm_loadu_si128((const __m128i *)(vo + x / 2));
        __m256i vb = _mm256_xor_si256(_mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o)), flip);
        __m256i bgr[2][3];
        for (int half = 0; half < 2; half++) {
            __m256i wy = half ? _mm256_unpackhi_epi8(yb, yb) : _mm256_unpacklo_epi8(yb, yb);
            __m256i wu = half ? _mm256_unpackhi_epi8(ub, ub) : _mm256_unpacklo_epi8(ub, ub);
            __m256i wv = half ? _mm256_unpackhi_epi8(vb, vb) : _mm256_unpacklo_epi8(vb, vb);
            wy = _mm256_mulhi_epi16(wy, cy);
            bgr[half][0] = _mm256_add_epi16(wy, _mm256_mulhi_epi16(wu, cbu));
            bgr[half][1] = _mm256_add_epi16(_mm256_add_epi16(wy, _mm256_mulhi_epi16(wu, cgu)), _mm256_mulhi_epi16(wv, cgv));
            bgr[half][2] = _mm256_add_epi16(wy, _mm256_mulhi_epi16(wv, crv));
        }
        __m256i b8 = _mm256_xor_si256(_mm256_packs_epi16(bgr[0][0], bgr[1][0]), flip);
        __m256i g8 = _mm256_xor_si256(_mm256_packs_epi16(bgr[0][1], bgr[1][1]), flip);
        __m256i r8 = _mm256_xor_si256(_mm256_packs_epi16(bgr[0][2], bgr[1][2]), flip);
        __m256i bg_lo = _mm256_unpacklo_epi8(b8, g8), bg_hi = _mm256_unpackhi_epi8(b8, g8);
        __m256i ra_lo = _mm256_unpacklo_epi8(r8, alpha), ra_hi = _mm256_unpackhi_epi8(r8, alpha);
        __m256i q0 = _mm256_unpacklo_epi16(bg_lo, ra_lo), q1 = _mm256_unpackhi_epi16(bg_lo, ra_lo);
        __m256i q2 = _mm256_unpacklo_epi16(bg_hi, ra_hi), q3 = _mm256_unpackhi_epi16(bg_hi, ra_hi);
        __m256i *d = (__m256i *)(out + x * 4);
        _mm256_storeu_si256(d + 0, _mm256_permute2x128_si256(q0, q1, 0x20));
        _mm256_storeu_si256(d + 1, _mm256_permute2x128_si256(q2, q3, 0x20));
        _mm256_storeu_si256(d + 2, _mm256_permute2x128_si256(q0, q1, 0x31));
        _mm256_storeu_si256(d + 3, _mm256_permute2x128_si256(q2, q3, 0x31));
    }
    return x;
}

static int has_avx2(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx2") ? 1 : 0;
    return known;
}
#endif

// One row: pixel 2k takes chroma ue/ve[k], pixel 2k + 1 takes uo/vo[k].
static void row_to_bgra(const ToRGB *c, const uint8_t *y, const uint8_t *ue, const uint8_t *uo,
                        const uint8_t *ve, const uint8_t *vo, uint8_t *out, int width) {
    int x = 0;
#if PCAST_HAVE_AVX2_PATH
    if (has_avx2()) x = row_to_bgra_avx2(c, y, ue, uo, ve, vo, out, width);
#endif
#if defined(__SSE2__)
    const __m128i flip = _mm_set1_epi8((char)0x80);
    const __m128i cy = _mm_set1_epi16(c->cy), crv = _mm_set1_epi16(c->crv);
    const __m128i cgu = _mm_set1_epi16(c->cgu), cgv = _mm_set1_epi16(c->cgv), cbu = _mm_set1_epi16(c->cbu);
    const __m128i alpha = _mm_set1_epi8((char)0xFF);
    for (; x + 16 <= width; x += 16) {
        __m128i yb = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(y + x)), flip);
        // Chroma in pixel order: e0 o0 e1 o1 ...
        __m128i ub = _mm_xor_si128(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(ue + x / 2)),
                                                     _mm_loadl_epi64((const __m128i *)(uo + x / 2))), flip);
        __m128i vb = _mm_xor_si128(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(ve + x / 2)),
                                                     _mm_loadl_epi64((const __m128i *)(vo + x / 2))), flip);
        __m128i bgr[2][3];
        for (int half = 0; half < 2; half++) {
            __m128i wy = half ? _mm_unpackhi_epi8(yb, yb) : _mm_unpacklo_epi8(yb, yb);
            __m128i wu = half ? _mm_unpackhi_epi8(ub, ub) : _mm_unpacklo_epi8(ub, ub);
            __m128i wv = half ? _mm_unpackhi_epi8(vb, vb) : _mm_unpacklo_epi8(vb, vb);
            wy = _mm_mulhi_epi16(wy, cy);
            bgr[half][0] = _mm_add_epi16(wy, _mm_mulhi_epi16(wu, cbu));
            bgr[half][1] = _mm_add_epi16(_mm_add_epi16(wy, _mm_mulhi_epi16(wu, cgu)), _mm_mulhi_epi16(wv, cgv));
            bgr[half][2] = _mm_add_epi16(wy, _mm_mulhi_epi16(wv, crv));
        }
        __m128i b8 = _mm_xor_si128(_mm_packs_epi16(bgr[0][0], bgr[1][0]), flip);
        __m128i g8 = _mm_xor_si128(_mm_packs_epi16(bgr[0][1], bgr[1][1]), flip);
        __m128i r8 = _mm_xor_si128(_mm_packs_epi16(bgr[0][2], bgr[1][2]), flip);
        __m128i bg_lo = _mm_unpacklo_epi8(b8, g8), bg_hi = _mm_unpackhi_epi8(b8, g8);
        __m128i ra_lo = _mm_unpacklo_epi8(r8, alpha), ra_hi = _mm_unpackhi_epi8(r8, alpha);
        __m128i *o = (__m128i *)(out + x * 4);
        _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(bg_lo, ra_lo));
        _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(bg_lo, ra_lo));
        _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(bg_hi, ra_hi));
        _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(bg_hi, ra_hi));
    }
#endif
    for (; x < width; x++) {
        int k = x >> 1;
        pixel_to_bgra(c, y[x], (x & 1) ? uo[k] : ue[k], (x & 1) ? vo[k] : ve[k], out + x * 4);
    }
}

// One chroma row upsampled horizontally as GStreamer's generic path does it: 3:1 filters between
// neighbours (chroma between the pixels), or the neighbours' average on odd pixels (cosited
// chroma); the first pixel, and a last odd one, keep their own sample. `chroma` is de-interleaved.
static void upsample_columns(const uint8_t *chroma, int chroma_width, int width, int h_cosited,
                             uint8_t *even, uint8_t *odd) {
    int last = chroma_width - 1;
    if (h_cosited) {
        for (int k = 0; k < last; k++) {
            even[k] = chroma[k];
            odd[k] = (uint8_t)((chroma[k] + chroma[k + 1] + 1) >> 1);
        }
    } else {
        even[0] = chroma[0];
        for (int k = 1; k <= last; k++) even[k] = (uint8_t)((chroma[k - 1] + 3 * chroma[k] + 2) >> 2);
        for (int k = 0; k < last; k++) odd[k] = (uint8_t)((3 * chroma[k] + chroma[k + 1] + 2) >> 2);
    }
    even[last] = h_cosited ? chroma[last] : even[last];
    // The last odd pixel (even widths) keeps its sample; with odd widths there is none.
    odd[last] = chroma[last];
    (void)width;
}

// Horizontally upsampled U and V of one chroma row, kept while neighbouring output rows use it.
typedef struct {
    int row;            // chroma row held, or -1
    uint8_t *ue, *uo, *ve, *vo;
} UpsampledRow;

static const UpsampledRow *upsampled(UpsampledRow cache[3], int row, const uint8_t *u, const uint8_t *v,
                                     int chroma_stride, int step, int chroma_width, int width, int h_cosited,
                                     uint8_t *line) {
    UpsampledRow *slot = &cache[row % 3];
    if (slot->row == row) return slot;
    const uint8_t *us = u + (size_t)row * chroma_stride, *vs = v + (size_t)row * chroma_stride;
    if (step == 1) {
        upsample_columns(us, chroma_width, width, h_cosited, slot->ue, slot->uo);
        upsample_columns(vs, chroma_width, width, h_cosited, slot->ve, slot->vo);
    } else {
        for (int k = 0; k < chroma_width; k++) line[k] = us[2 * k];
        upsample_columns(line, chroma_width, width, h_cosited, slot->ue, slot->uo);
        for (int k = 0; k < chroma_width; k++) line[k] = vs[2 * k];
        upsample_columns(line, chroma_width, width, h_cosited, slot->ve, slot->vo);
    }
    slot->row = row;
    return slot;
}

static void blend_3_1(const uint8_t *near, const uint8_t *far, uint8_t *out, int count) {
    for (int k = 0; k < count; k++) out[k] = (uint8_t)((3 * near[k] + far[k] + 2) >> 2);
}

int pcast_convert_yuv420_to_bgra(const uint8_t *y, int y_stride, const uint8_t *u, const uint8_t *v,
                                 int chroma_stride, int chroma_step, int width, int height,
                                 PCastChromaResampling resampling, double kr, double kb, int full_range,
                                 uint8_t *out, int out_stride) {
    if (width <= 0 || height <= 0 || (chroma_step != 1 && chroma_step != 2)) return 0;
    ToRGB c = to_rgb_coefficients(kr, kb, full_range);
    int chroma_width = (width + 1) / 2, chroma_height = (height + 1) / 2;
    if (resampling == PCAST_CHROMA_NEAREST && chroma_step == 1) {
        // I420 as GStreamer's fast path does it: each chroma row serves two rows, each sample two pixels.
        for (int row = 0; row < height; row++) {
            const uint8_t *ur = u + (size_t)(row >> 1) * chroma_stride, *vr = v + (size_t)(row >> 1) * chroma_stride;
            row_to_bgra(&c, y + (size_t)row * y_stride, ur, ur, vr, vr, out + (size_t)row * out_stride, width);
        }
        return 1;
    }
    // Rows of chroma_width bytes (+ 32 of slack for the vector loads): 3 cached rows of 4 arrays,
    // 4 arrays for the blended row, one de-interleaving line.
    size_t pitch = (size_t)chroma_width + 32;
    uint8_t *scratch = malloc(pitch * 17);
    if (!scratch) return 0;
    UpsampledRow cache[3];
    for (int i = 0; i < 3; i++) {
        uint8_t *base = scratch + pitch * 4 * (size_t)i;
        cache[i] = (UpsampledRow){-1, base, base + pitch, base + pitch * 2, base + pitch * 3};
    }
    uint8_t *blend = scratch + pitch * 12, *line = scratch + pitch * 16;
    int h_cosited = resampling == PCAST_CHROMA_INTERPOLATE_H_COSITED;
    for (int row = 0; row < height; row++) {
        int near_row = row >> 1;
        const uint8_t *ue, *uo, *ve, *vo;
        if (resampling == PCAST_CHROMA_NEAREST) {
            // NV12 without interpolation: de-interleave the row's chroma.
            const uint8_t *us = u + (size_t)near_row * chroma_stride, *vs = v + (size_t)near_row * chroma_stride;
            for (int k = 0; k < chroma_width; k++) {
                blend[k] = us[2 * k];
                blend[pitch + k] = vs[2 * k];
            }
            ue = uo = blend;
            ve = vo = blend + pitch;
        } else {
            // Odd rows lean on the chroma row below, even rows on the one above.
            int far_row = (row & 1) ? near_row + 1 : near_row - 1;
            if (far_row < 0 || far_row >= chroma_height) far_row = near_row;
            const UpsampledRow *n = upsampled(cache, near_row, u, v, chroma_stride, chroma_step, chroma_width, width, h_cosited, line);
            if (far_row == near_row) {
                ue = n->ue; uo = n->uo; ve = n->ve; vo = n->vo;
            } else {
                const UpsampledRow *f = upsampled(cache, far_row, u, v, chroma_stride, chroma_step, chroma_width, width, h_cosited, line);
                blend_3_1(n->ue, f->ue, blend, chroma_width);
                blend_3_1(n->uo, f->uo, blend + pitch, chroma_width);
                blend_3_1(n->ve, f->ve, blend + pitch * 2, chroma_width);
                blend_3_1(n->vo, f->vo, blend + pitch * 3, chroma_width);
                ue = blend; uo = blend + pitch; ve = blend + pitch * 2; vo = blend + pitch * 3;
            }
        }
        row_to_bgra(&c, y + (size_t)row * y_stride, ue, uo, ve, vo, out + (size_t)row * out_stride, width);
    }
    free(scratch);
    return 1;
}

// RGB -> YUV as GStreamer's 8-bit matrix does it: coefficients scaled by 256, the weighted sum
// shifted down (rounding towards minus infinity), plus the offset (16 or 128).
typedef struct {
    int yr, yg, yb, y_offset;
    int ur, ug, ub, vr, vg, vb;
} ToYUV;

static ToYUV to_yuv_coefficients(double kr, double kb, int full_range) {
    double kg = 1.0 - kr - kb;
    double ys = full_range ? 1.0 : 219.0 / 255.0;
    double cs = full_range ? 1.0 : 224.0 / 255.0;
    double ud = 2.0 * (1.0 - kb), vd = 2.0 * (1.0 - kr);
    ToYUV c;
    c.yr = fixed8(kr * ys);
    c.yg = fixed8(kg * ys);
    c.yb = fixed8(kb * ys);
    c.y_offset = full_range ? 0 : 16;
    c.ur = fixed8(-kr / ud * cs);
    c.ug = fixed8(-kg / ud * cs);
    c.ub = fixed8((1.0 - kb) / ud * cs);
    c.vr = fixed8((1.0 - kr) / vd * cs);
    c.vg = fixed8(-kg / vd * cs);
    c.vb = fixed8(-kb / vd * cs);
    return c;
}

static void row_to_luma(const ToYUV *c, const uint8_t *in, uint8_t *y, int width) {
    int x = 0;
    const int bias = c->y_offset << 8;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128i weights = _mm_setr_epi16((short)c->yb, (short)c->yg, (short)c->yr, 0, (short)c->yb, (short)c->yg, (short)c->yr, 0);
    const __m128i vbias = _mm_set1_epi32(bias);
    for (; x + 16 <= width; x += 16) {
        __m128i sums[4];
        for (int q = 0; q < 4; q++) {
            __m128i px = _mm_loadu_si128((const __m128i *)(in + (x + q * 4) * 4));
            // Per pixel: B*wb + G*wg and R*wr, as 32-bit pairs.
            __m128i lo = _mm_madd_epi16(_mm_unpacklo_epi8(px, zero), weights);
            __m128i hi = _mm_madd_epi16(_mm_unpackhi_epi8(px, zero), weights);
            __m128 lo_f = _mm_castsi128_ps(lo), hi_f = _mm_castsi128_ps(hi);
            __m128i first = _mm_castps_si128(_mm_shuffle_ps(lo_f, hi_f, _MM_SHUFFLE(2, 0, 2, 0)));
            __m128i second = _mm_castps_si128(_mm_shuffle_ps(lo_f, hi_f, _MM_SHUFFLE(3, 1, 3, 1)));
            sums[q] = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(first, second), vbias), 8);
        }
        __m128i packed = _mm_packus_epi16(_mm_packs_epi32(sums[0], sums[1]), _mm_packs_epi32(sums[2], sums[3]));
        _mm_storeu_si128((__m128i *)(y + x), packed);
    }
#endif
    for (; x < width; x++) {
        const uint8_t *p = in + x * 4;
        y[x] = clamp8((p[0] * c->yb + p[1] * c->yg + p[2] * c->yr + bias) >> 8);
    }
}

// One chroma sample from pixel sums (each already two rows): weights 1-2-1 (left, here, right) or
// 1-1 (here, right), in Q8, plus 128.
static inline void chroma_sample(const ToYUV *c, const int16_t *sb, const int16_t *sg, const int16_t *sr,
                                 int left, int here, int right, int cosited, uint8_t *u, uint8_t *v) {
    int b, g, r, shift;
    if (cosited) {
        b = sb[left] + 2 * sb[here] + sb[right];
        g = sg[left] + 2 * sg[here] + sg[right];
        r = sr[left] + 2 * sr[here] + sr[right];
        shift = 11;
    } else {
        b = sb[here] + sb[right];
        g = sg[here] + sg[right];
        r = sr[here] + sr[right];
        shift = 10;
    }
    *u = clamp8((b * c->ub + g * c->ug + r * c->ur + (128 << shift)) >> shift);
    *v = clamp8((b * c->vb + g * c->vg + r * c->vr + (128 << shift)) >> shift);
}

int pcast_convert_bgra_to_yuv420(const uint8_t *in, int in_stride, uint8_t *y, int y_stride,
                                 uint8_t *u, uint8_t *v, int chroma_stride, int chroma_step,
                                 int width, int height, int h_cosited, double kr, double kb, int full_range) {
    if (width <= 0 || height <= 0 || (chroma_step != 1 && chroma_step != 2)) return 0;
    ToYUV c = to_yuv_coefficients(kr, kb, full_range);
    int chroma_width = (width + 1) / 2;
    // Per pixel, two rows summed: B, G and R apart, so the loops below vectorise.
    int16_t *sums = malloc(sizeof(int16_t) * 3 * (size_t)(width + 2));
    if (!sums) return 0;
    int16_t *sb = sums, *sg = sums + width + 2, *sr = sums + 2 * (width + 2);
    for (int row = 0; row < height; row++) {
        row_to_luma(&c, in + (size_t)row * in_stride, y + (size_t)row * y_stride, width);
    }
    for (int crow = 0; crow < (height + 1) / 2; crow++) {
        const uint8_t *a = in + (size_t)(2 * crow) * in_stride;
        const uint8_t *b = 2 * crow + 1 < height ? a + in_stride : a;
        for (int x = 0; x < width; x++) {
            sb[x] = (int16_t)(a[x * 4 + 0] + b[x * 4 + 0]);
            sg[x] = (int16_t)(a[x * 4 + 1] + b[x * 4 + 1]);
            sr[x] = (int16_t)(a[x * 4 + 2] + b[x * 4 + 2]);
        }
        uint8_t *uo = u + (size_t)crow * chroma_stride, *vo = v + (size_t)crow * chroma_stride;
        int last = chroma_width - 1;
        if (h_cosited) {
            // 1-2-1 around each even pixel; 3-1 at the left edge, 1-3 at the right edge.
            if (width == 1) {
                chroma_sample(&c, sb, sg, sr, 0, 0, 0, 1, uo, vo);
            } else {
                chroma_sample(&c, sb, sg, sr, 0, 0, 1, 1, uo, vo);
                for (int k = 1; k < last; k++) {
                    chroma_sample(&c, sb, sg, sr, 2 * k - 1, 2 * k, 2 * k + 1, 1, uo + k * chroma_step, vo + k * chroma_step);
                }
                if (last > 0) chroma_sample(&c, sb, sg, sr, 2 * last - 1, 2 * last, 2 * last, 1, uo + last * chroma_step, vo + last * chroma_step);
            }
        } else {
            for (int k = 0; k < width / 2; k++) {
                chroma_sample(&c, sb, sg, sr, 0, 2 * k, 2 * k + 1, 0, uo + k * chroma_step, vo + k * chroma_step);
            }
            // An odd width's last column has no neighbour: the pixel counts twice.
            if (width & 1) chroma_sample(&c, sb, sg, sr, 0, width - 1, width - 1, 0, uo + last * chroma_step, vo + last * chroma_step);
        }
    }
    free(sums);
    return 1;
}
