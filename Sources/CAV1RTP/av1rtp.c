// pcastav1pay and pcastav1depay: GObject subclasses of GStreamer's RTP base classes whose payload
// work is done by the Swift functions handed to pcast_av1_elements_register (see the header).
#include "CAV1RTP.h"

#include <gst/rtp/rtp.h>
#include <gst/video/video.h>
#include <string.h>

static const PCastAV1Functions *av1_functions = NULL;

// MARK: pcastav1pay

typedef struct {
    GstRTPBasePayload parent;
} PCastAV1Pay;

typedef struct {
    GstRTPBasePayloadClass parent_class;
} PCastAV1PayClass;

G_DEFINE_TYPE(PCastAV1Pay, pcast_av1_pay, GST_TYPE_RTP_BASE_PAYLOAD)

static GstStaticPadTemplate pay_sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS,
    // av1enc names no stream-format (it writes the low-overhead "obu-stream" one): an annexb
    // stream is refused in set_caps.
    GST_STATIC_CAPS("video/x-av1, alignment = (string) tu"));

static GstStaticPadTemplate pay_src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("application/x-rtp, media = (string) video, payload = (int) [ 96, 127 ], "
                    "clock-rate = (int) 90000, encoding-name = (string) AV1"));

// What `emit` needs to make a packet: the element and the list the unit's packets go in.
typedef struct {
    GstRTPBasePayload *payload;
    GstBufferList *list;
    GstClockTime pts;
} PayContext;

static void pay_emit(void *sink, const guint8 *bytes, gsize size, gboolean marker) {
    PayContext *context = sink;
    GstBuffer *buffer = gst_rtp_base_payload_allocate_output_buffer(context->payload, (guint)size, 0, 0);
    GstRTPBuffer rtp = GST_RTP_BUFFER_INIT;
    if (!gst_rtp_buffer_map(buffer, GST_MAP_WRITE, &rtp)) {
        gst_buffer_unref(buffer);
        return;
    }
    memcpy(gst_rtp_buffer_get_payload(&rtp), bytes, size);
    gst_rtp_buffer_set_marker(&rtp, marker);
    gst_rtp_buffer_unmap(&rtp);
    GST_BUFFER_PTS(buffer) = context->pts;
    gst_buffer_list_add(context->list, buffer);
}

static gboolean pay_set_caps(GstRTPBasePayload *payload, GstCaps *caps) {
    const gchar *format = gst_structure_get_string(gst_caps_get_structure(caps, 0), "stream-format");
    if (format && g_strcmp0(format, "obu-stream") != 0) {
        GST_ELEMENT_ERROR(payload, STREAM, FORMAT, ("AV1 in the %s stream format: the payloader takes obu-stream", format), (NULL));
        return FALSE;
    }
    gst_rtp_base_payload_set_options(payload, "video", TRUE, "AV1", 90000);
    return gst_rtp_base_payload_set_outcaps(payload, NULL);
}

static GstFlowReturn pay_handle_buffer(GstRTPBasePayload *payload, GstBuffer *buffer) {
    GstMapInfo map;
    if (!gst_buffer_map(buffer, &map, GST_MAP_READ)) {
        gst_buffer_unref(buffer);
        return GST_FLOW_ERROR;
    }
    PayContext context = {payload, gst_buffer_list_new(), GST_BUFFER_PTS(buffer)};
    guint max_payload = gst_rtp_buffer_calc_payload_len(GST_RTP_BASE_PAYLOAD_MTU(payload), 0, 0);
    gboolean read = av1_functions->packetize(map.data, map.size, max_payload, &context, pay_emit);
    gst_buffer_unmap(buffer, &map);
    gst_buffer_unref(buffer);
    if (!read) {
        GST_ELEMENT_WARNING(payload, STREAM, FORMAT, ("an AV1 temporal unit that does not parse was dropped"), (NULL));
    }
    if (gst_buffer_list_length(context.list) == 0) {
        gst_buffer_list_unref(context.list);
        return GST_FLOW_OK;
    }
    return gst_rtp_base_payload_push_list(payload, context.list);
}

static void pcast_av1_pay_class_init(PCastAV1PayClass *klass) {
    GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
    GstRTPBasePayloadClass *payload_class = GST_RTP_BASE_PAYLOAD_CLASS(klass);
    gst_element_class_add_static_pad_template(element_class, &pay_sink_template);
    gst_element_class_add_static_pad_template(element_class, &pay_src_template);
    gst_element_class_set_static_metadata(element_class, "PCastKit AV1 RTP payloader", "Codec/Payloader/Network/RTP",
                                          "Payloads AV1 temporal units in RTP (AOMedia RTP Payload Format for AV1)",
                                          "PCastKit");
    payload_class->set_caps = pay_set_caps;
    payload_class->handle_buffer = pay_handle_buffer;
}

static void pcast_av1_pay_init(PCastAV1Pay *pay) { (void)pay; }

// MARK: pcastav1depay

typedef struct {
    GstRTPBaseDepayload parent;
    void *state;  // the Swift reassembler, while PAUSED or PLAYING
    gboolean request_keyframe;
    gboolean wait_for_keyframe;
} PCastAV1Depay;

typedef struct {
    GstRTPBaseDepayloadClass parent_class;
} PCastAV1DepayClass;

G_DEFINE_TYPE(PCastAV1Depay, pcast_av1_depay, GST_TYPE_RTP_BASE_DEPAYLOAD)

enum { PROP_0, PROP_REQUEST_KEYFRAME, PROP_WAIT_FOR_KEYFRAME };

static GstStaticPadTemplate depay_sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("application/x-rtp, media = (string) video, clock-rate = (int) 90000, encoding-name = (string) AV1"));

static GstStaticPadTemplate depay_src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("video/x-av1, stream-format = (string) obu-stream, alignment = (string) tu"));

static void depay_emit(void *sink, const guint8 *bytes, gsize size, gboolean keyframe) {
    GstBuffer **out = sink;
    GstBuffer *buffer = gst_buffer_new_memdup(bytes, size);
    if (!keyframe) GST_BUFFER_FLAG_SET(buffer, GST_BUFFER_FLAG_DELTA_UNIT);
    if (*out) gst_buffer_unref(*out);  // one unit per packet at most; kept the newest
    *out = buffer;
}

static gboolean depay_set_caps(GstRTPBaseDepayload *depayload, GstCaps *caps) {
    (void)caps;
    GstCaps *src = gst_caps_new_simple("video/x-av1", "stream-format", G_TYPE_STRING, "obu-stream",
                                       "alignment", G_TYPE_STRING, "tu", NULL);
    gboolean set = gst_pad_set_caps(GST_RTP_BASE_DEPAYLOAD_SRCPAD(depayload), src);
    gst_caps_unref(src);
    return set;
}

static GstBuffer *depay_process(GstRTPBaseDepayload *depayload, GstRTPBuffer *rtp) {
    PCastAV1Depay *depay = (PCastAV1Depay *)depayload;
    if (!depay->state) return NULL;
    GstBuffer *out = NULL;
    gboolean lost = av1_functions->depacketize(depay->state, gst_rtp_buffer_get_payload(rtp), gst_rtp_buffer_get_payload_len(rtp),
                                               gst_rtp_buffer_get_seq(rtp), gst_rtp_buffer_get_timestamp(rtp),
                                               gst_rtp_buffer_get_marker(rtp), &out, depay_emit);
    if (lost && depay->request_keyframe) {
        gst_pad_push_event(GST_RTP_BASE_DEPAYLOAD_SINKPAD(depayload),
                           gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, 0));
    }
    return out;
}

static gboolean depay_handle_event(GstRTPBaseDepayload *depayload, GstEvent *event) {
    PCastAV1Depay *depay = (PCastAV1Depay *)depayload;
    if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP && depay->state) av1_functions->depacketizer_reset(depay->state);
    return GST_RTP_BASE_DEPAYLOAD_CLASS(pcast_av1_depay_parent_class)->handle_event(depayload, event);
}

static GstStateChangeReturn depay_change_state(GstElement *element, GstStateChange transition) {
    PCastAV1Depay *depay = (PCastAV1Depay *)element;
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED && !depay->state) {
        depay->state = av1_functions->depacketizer_new(depay->wait_for_keyframe);
    }
    GstStateChangeReturn result = GST_ELEMENT_CLASS(pcast_av1_depay_parent_class)->change_state(element, transition);
    if (transition == GST_STATE_CHANGE_PAUSED_TO_READY && depay->state) {
        av1_functions->depacketizer_free(depay->state);
        depay->state = NULL;
    }
    return result;
}

static void depay_finalize(GObject *object) {
    PCastAV1Depay *depay = (PCastAV1Depay *)object;
    if (depay->state) av1_functions->depacketizer_free(depay->state);
    depay->state = NULL;
    G_OBJECT_CLASS(pcast_av1_depay_parent_class)->finalize(object);
}

static void depay_set_property(GObject *object, guint id, const GValue *value, GParamSpec *spec) {
    PCastAV1Depay *depay = (PCastAV1Depay *)object;
    switch (id) {
    case PROP_REQUEST_KEYFRAME: depay->request_keyframe = g_value_get_boolean(value); break;
    case PROP_WAIT_FOR_KEYFRAME: depay->wait_for_keyframe = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec); break;
    }
}

static void depay_get_property(GObject *object, guint id, GValue *value, GParamSpec *spec) {
    PCastAV1Depay *depay = (PCastAV1Depay *)object;
    switch (id) {
    case PROP_REQUEST_KEYFRAME: g_value_set_boolean(value, depay->request_keyframe); break;
    case PROP_WAIT_FOR_KEYFRAME: g_value_set_boolean(value, depay->wait_for_keyframe); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec); break;
    }
}

static void pcast_av1_depay_class_init(PCastAV1DepayClass *klass) {
    GObjectClass *object_class = G_OBJECT_CLASS(klass);
    GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
    GstRTPBaseDepayloadClass *depayload_class = GST_RTP_BASE_DEPAYLOAD_CLASS(klass);
    object_class->set_property = depay_set_property;
    object_class->get_property = depay_get_property;
    object_class->finalize = depay_finalize;
    g_object_class_install_property(object_class, PROP_REQUEST_KEYFRAME,
        g_param_spec_boolean("request-keyframe", "Request keyframe", "Ask upstream for a keyframe when a unit is lost",
                             FALSE, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS));
    g_object_class_install_property(object_class, PROP_WAIT_FOR_KEYFRAME,
        g_param_spec_boolean("wait-for-keyframe", "Wait for keyframe", "Output nothing before the first keyframe",
                             FALSE, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS));
    gst_element_class_add_static_pad_template(element_class, &depay_sink_template);
    gst_element_class_add_static_pad_template(element_class, &depay_src_template);
    gst_element_class_set_static_metadata(element_class, "PCastKit AV1 RTP depayloader", "Codec/Depayloader/Network/RTP",
                                          "Reassembles AV1 temporal units from RTP (AOMedia RTP Payload Format for AV1)",
                                          "PCastKit");
    element_class->change_state = depay_change_state;
    depayload_class->set_caps = depay_set_caps;
    depayload_class->process_rtp_packet = depay_process;
    depayload_class->handle_event = depay_handle_event;
}

static void pcast_av1_depay_init(PCastAV1Depay *depay) {
    depay->state = NULL;
    depay->request_keyframe = FALSE;
    depay->wait_for_keyframe = FALSE;
}

gboolean pcast_av1_elements_register(GstPlugin *plugin, const PCastAV1Functions *functions) {
    if (!functions) return FALSE;
    av1_functions = functions;
    return gst_element_register(plugin, "pcastav1pay", GST_RANK_NONE, pcast_av1_pay_get_type())
        && gst_element_register(plugin, "pcastav1depay", GST_RANK_NONE, pcast_av1_depay_get_type());
}
