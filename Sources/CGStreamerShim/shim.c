#include "CGStreamerShim.h"

GType pcast_g_type_boolean(void) { return G_TYPE_BOOLEAN; }
GType pcast_g_type_int(void) { return G_TYPE_INT; }
GType pcast_g_type_uint(void) { return G_TYPE_UINT; }
GType pcast_g_type_long(void) { return G_TYPE_LONG; }
GType pcast_g_type_ulong(void) { return G_TYPE_ULONG; }
GType pcast_g_type_int64(void) { return G_TYPE_INT64; }
GType pcast_g_type_uint64(void) { return G_TYPE_UINT64; }
GType pcast_g_type_float(void) { return G_TYPE_FLOAT; }
GType pcast_g_type_double(void) { return G_TYPE_DOUBLE; }
GType pcast_g_type_string(void) { return G_TYPE_STRING; }
GType pcast_g_type_enum(void) { return G_TYPE_ENUM; }
GType pcast_g_type_flags(void) { return G_TYPE_FLAGS; }
GType pcast_gst_type_caps(void) { return GST_TYPE_CAPS; }
GType pcast_gst_type_fraction(void) { return GST_TYPE_FRACTION; }

GType pcast_g_object_type(gpointer object) { return G_OBJECT_TYPE(object); }
GParamSpec *pcast_g_object_find_property(gpointer object, const gchar *name) {
    return g_object_class_find_property(G_OBJECT_GET_CLASS(object), name);
}

gboolean pcast_gst_is_bin(gpointer object) { return GST_IS_BIN(object); }
gboolean pcast_gst_is_app_sink(gpointer object) { return GST_IS_APP_SINK(object); }
gboolean pcast_gst_is_app_src(gpointer object) { return GST_IS_APP_SRC(object); }

void pcast_gst_element_post_warning(GstElement *element, const gchar *text, const gchar *debug) {
    GST_ELEMENT_WARNING(element, CORE, FAILED, ("%s", text), ("%s", debug ? debug : ""));
}
void pcast_gst_element_post_error(GstElement *element, const gchar *text, const gchar *debug) {
    GST_ELEMENT_ERROR(element, CORE, FAILED, ("%s", text), ("%s", debug ? debug : ""));
}

GstBuffer *pcast_gst_buffer_make_writable(GstBuffer *buffer) { return gst_buffer_make_writable(buffer); }
gboolean pcast_gst_buffer_is_writable(GstBuffer *buffer) { return gst_buffer_is_writable(buffer); }

