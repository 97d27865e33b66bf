// The plugin's element types (GObject boilerplate, shared by plugin.c and the elements).
#ifndef PCAST_GST_ELEMENTS_H
#define PCAST_GST_ELEMENTS_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define PCAST_TYPE_SINK (pcast_sink_get_type())
G_DECLARE_FINAL_TYPE(PCastSink, pcast_sink, PCAST, SINK, GstBin)

#define PCAST_TYPE_SRC (pcast_src_get_type())
G_DECLARE_FINAL_TYPE(PCastSrc, pcast_src, PCAST, SRC, GstBin)

G_END_DECLS

#endif
