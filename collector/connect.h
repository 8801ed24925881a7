/* connect.h: Connect's unary protocol (connectrpc.com) for the messages protoc-c generates
 * from proto/: a request is POST /PACKAGE.SERVICE/METHOD whose body is the request message,
 * binary protobuf (Content-Type application/proto, also application/x-protobuf) or JSON
 * (application/json, protobuf's JSON mapping); the answer is the response message in the same
 * codec, or an error: an HTTP status and {"code": ..., "message": ...}. protobuf-c has no JSON,
 * so the mapping is done here once for every message, from the generated descriptors:
 * lowerCamelCase field names (the proto names are accepted too), 64-bit integers as strings,
 * bytes as base64, enums by name, fields at their zero value left out. No I/O: the HTTP
 * layer collects the body, the fuzz target calls these directly. */
#ifndef PA_COLL_CONNECT_H
#define PA_COLL_CONNECT_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "http.h"

enum pa_coll_codec { PA_CODEC_PROTO, PA_CODEC_JSON };

/* The codec a Content-Type names; -1 for one Connect does not know (the caller answers 415). */
int pa_coll_connect_codec(const char *content_type, enum pa_coll_codec *codec);

/* Decodes a request body (every string checked to be valid UTF-8, as Go's protobuf does); NULL
 * with err for a malformed one. Free with protobuf_c_message_free_unpacked(m, NULL). */
ProtobufCMessage *pa_coll_connect_decode(const ProtobufCMessageDescriptor *d,
                                         enum pa_coll_codec codec, const uint8_t *body, size_t len,
                                         pa_error *err);

/* The message in JSON (protobuf's JSON mapping), appended to out. */
void pa_coll_pb_to_json(const ProtobufCMessage *m, pa_buf *out);

/* A 200 answer holding m in the codec. */
void pa_coll_connect_respond(struct pa_coll_response *r, enum pa_coll_codec codec,
                             const ProtobufCMessage *m);
/* A Connect error for one of the collector's statuses: 400, 413 and 422 are invalid_argument
 * (HTTP 400, as Grafana Pyroscope answers a Push it refuses), 401 unauthenticated, 404
 * not_found, 415 internal... see connect.c; msg is the message. */
void pa_coll_connect_error(struct pa_coll_response *r, int status, const char *msg);

/* The value of a base64 digit (standard or URL alphabet), -1 for any other character. */
int pa_coll_b64val(int c);

/* Are all the strings of m (and of its submessages) valid UTF-8? -1 with the field in err. */
int pa_coll_pb_utf8_check(const ProtobufCMessage *m, pa_error *err);

#endif
