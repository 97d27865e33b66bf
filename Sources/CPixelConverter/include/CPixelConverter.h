// Our own 4:2:0 YUV <-> BGRA converters (convert.c): GstVideoConverter takes 0.8 ms and 2 ms per
// 720p frame for these, too slow for the frame-ready API's budget. Plain functions over plane
// pointers, no GStreamer (the GStreamer layer checks layouts and calls them); they return 0 for
// sizes or layouts they do not take (nothing is written then).
//
// A target of its own so that its build settings are its own: the manifest carries no unsafe
// flags (a package with them cannot be a versioned dependency). Release builds are optimised as
// usual; `make` passes `-Xcc -O2` to debug builds so tests convert real frames at full speed.
#ifndef PCAST_PIXEL_CONVERTER_H
#define PCAST_PIXEL_CONVERTER_H

#include <stdint.h>

/// How chroma is spread over the pixels of each 2x2 block when converting to BGRA.
typedef enum {
    /// Each chroma sample for its 2x2 pixels (GStreamer's I420 -> BGRA fast path).
    PCAST_CHROMA_NEAREST = 0,
    /// 3:1 filters across rows and columns (GStreamer's generic path, chroma between the pixels).
    PCAST_CHROMA_INTERPOLATE = 1,
    /// 3:1 filters across rows, the neighbours' average between columns (horizontally cosited chroma).
    PCAST_CHROMA_INTERPOLATE_H_COSITED = 2,
} PCastChromaResampling;

/// I420 (chroma_step 1, separate U and V planes) or NV12 (chroma_step 2, v = u + 1) to BGRA.
/// kr, kb: the matrix's luma weights; full_range: 0-255 YUV instead of 16-235/240.
int pcast_convert_yuv420_to_bgra(const uint8_t *y, int y_stride, const uint8_t *u, const uint8_t *v,
                                 int chroma_stride, int chroma_step, int width, int height,
                                 PCastChromaResampling resampling, double kr, double kb, int full_range,
                                 uint8_t *out, int out_stride);

/// BGRA to I420 or NV12, chroma averaged over each 2x2 block (1-2-1 across columns when h_cosited).
int pcast_convert_bgra_to_yuv420(const uint8_t *in, int in_stride, uint8_t *y, int y_stride,
                                 uint8_t *u, uint8_t *v, int chroma_stride, int chroma_step,
                                 int width, int height, int h_cosited, double kr, double kb, int full_range);

#endif
