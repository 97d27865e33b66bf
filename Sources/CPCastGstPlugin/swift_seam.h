// C -> Swift: implemented in Swift with @_cdecl (Sources/PCastGstPlugin/Seam.swift). Not in
// include/: Swift must not import declarations of its own @_cdecl functions.
#ifndef PCAST_GST_SWIFT_SEAM_H
#define PCAST_GST_SWIFT_SEAM_H

#include "CPCastGstPlugin.h"

// Once from plugin_init (also inside gst-plugin-scanner): cheap. FALSE fails the plugin load.
gboolean pcast_swift_plugin_init(void);

// One Swift context per element: made in instance_init, released in finalize. `element` is not
// retained by the context (the element owns it); work in flight holds its own reference.
void *pcast_swift_sink_new(GstElement *element);
void pcast_swift_sink_free(void *context);
// READY -> PAUSED: returns at once (connecting runs in a task); FALSE fails the state change.
gboolean pcast_swift_sink_start(void *context, const PCastSinkSettings *settings);
// A sample from the pad's appsink (transfer none), on its streaming thread.
void pcast_swift_sink_sample(void *context, PCastPadKind kind, GstSample *sample);
// A Matroska sample (H.264 and Opus passed through or encoded in the bin) from the passthrough
// chain (transfer none).
void pcast_swift_sink_muxed(void *context, GstSample *sample);
// The pad's end of stream, on its streaming thread: once every pad has ended, ends the stream
// (reason `ended`) and returns when the platform has it, or after a bounded wait.
void pcast_swift_sink_eos(void *context, PCastPadKind kind);
// PAUSED -> READY: ends what start began, waiting (bounded) for the stream's end to be sent.
void pcast_swift_sink_stop(void *context);

void *pcast_swift_src_new(GstElement *element);
void pcast_swift_src_free(void *context);
gboolean pcast_swift_src_start(void *context, const PCastSourceSettings *settings);
void pcast_swift_src_stop(void *context);

#endif
