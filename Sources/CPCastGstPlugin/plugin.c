// The plugin's entry point. GST_PLUGIN_DEFINE exports gst_plugin_pcast_get_desc, which GStreamer
// looks up from the file name (libgstpcast.so -> "pcast"): product, file and plugin names agree.
#include <gst/gst.h>
#include "swift_seam.h"
#include "elements.h"

#ifndef PACKAGE
#define PACKAGE "pcastkit"
#endif

// Also runs inside gst-plugin-scanner whenever the registry is rebuilt: nothing slow here.
static gboolean plugin_init(GstPlugin *plugin) {
  if (!pcast_swift_plugin_init()) return FALSE;
  return gst_element_register(plugin, "pcastsink", GST_RANK_NONE, PCAST_TYPE_SINK)
      && gst_element_register(plugin, "pcastsrc", GST_RANK_NONE, PCAST_TYPE_SRC);
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, pcast,
    "PCast platform elements: publish (pcastsink) and subscribe (pcastsrc) with the PCastKit SDK",
    plugin_init, "0.2.0", "Proprietary", "PCastKit", "https://github.com/pcastkit/pcastkit")

void pcast_element_post(GstElement *element, const char *name, const char *key1, const char *value1,
                        const char *key2, const char *value2) {
  GstStructure *structure = gst_structure_new_empty(name);
  if (key1) gst_structure_set(structure, key1, G_TYPE_STRING, value1, NULL);
  if (key1 && key2) gst_structure_set(structure, key2, G_TYPE_STRING, value2, NULL);
  gst_element_post_message(element, gst_message_new_element(GST_OBJECT(element), structure));
}

void pcast_element_post_error(GstElement *element, const char *message, const char *debug) {
  GST_ELEMENT_ERROR(element, RESOURCE, FAILED, ("%s", message), ("%s", debug ? debug : ""));
}
