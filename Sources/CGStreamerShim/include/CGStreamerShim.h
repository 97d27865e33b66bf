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

#endif
