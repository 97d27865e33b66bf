// The GStreamer headers PCastKit imports. All live under the gstreamer-1.0 include path.
#include <gst/gst.h>
#include <gst/app/app.h>
#include <gst/video/video.h>
#include <gst/audio/audio.h>
#include <gst/rtp/rtp.h>
#include <gst/pbutils/pbutils.h>
