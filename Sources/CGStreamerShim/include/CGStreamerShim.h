// Only what Swift cannot import from GStreamer/GLib: function-like macros and macro-built constants.
// Every name is prefixed `pcast_`; each line says why it exists.
#ifndef PCAST_CGSTREAMER_SHIM_H
#define PCAST_CGSTREAMER_SHIM_H

#include <gst/gst.h>
#include <gst/app/app.h>
#include <gst/video/video.h>
#include <gst/audio/audio.h>

// G_TYPE_* fundamentals are built by the function-like macro G_TYPE_MAKE_FUNDAMENTAL.
GType pcast_g_type_boolean(void);
GType pcast_g_type_int(void);
GType pcast_g_type_uint(void);
GType pcast_g_type_long(void);
GType pcast_g_type_ulong(void);
GType pcast_g_type_int64(void);
GType pcast_g_type_uint64(void);
GType pcast_g_type_float(void);
GType pcast_g_type_double(void);
GType pcast_g_type_string(void);
GType pcast_g_type_enum(void);
GType pcast_g_type_flags(void);

// GST_TYPE_CAPS and GST_TYPE_FRACTION expand to exported variables that Swift sees only as macros.
GType pcast_gst_type_caps(void);
GType pcast_gst_type_fraction(void);

// G_OBJECT_TYPE / G_OBJECT_GET_CLASS are function-like macros.
GType pcast_g_object_type(gpointer object);
GParamSpec *pcast_g_object_find_property(gpointer object, const gchar *name);

// GST_IS_BIN / GST_IS_PIPELINE / GST_IS_APP_SINK / GST_IS_APP_SRC are function-like macros.
gboolean pcast_gst_is_bin(gpointer object);
gboolean pcast_gst_is_app_sink(gpointer object);
gboolean pcast_gst_is_app_src(gpointer object);

// GST_ELEMENT_WARNING / GST_ELEMENT_ERROR are variadic function-like macros.
void pcast_gst_element_post_warning(GstElement *element, const gchar *text, const gchar *debug);
void pcast_gst_element_post_error(GstElement *element, const gchar *text, const gchar *debug);

// gst_buffer_make_writable / gst_buffer_is_writable / gst_caps_ref are macros over mini-object calls.
GstBuffer *pcast_gst_buffer_make_writable(GstBuffer *buffer);
gboolean pcast_gst_buffer_is_writable(GstBuffer *buffer);

// Our own 4:2:0 YUV <-> BGRA converters (convert.c): GstVideoConverter takes 0.8 ms and 2 ms per
// 720p frame for these, too slow for the frame-ready API's budget. Plain functions over plane
// pointers; they return 0 for sizes or layouts they do not take (nothing is written then).
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
