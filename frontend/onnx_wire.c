/*
 * onnx_wire.c — why protobuf-c rejected a file, with the byte offset.
 *
 * protobuf-c's unpack says only "no" (NULL). When it does, this walks the
 * protobuf wire format again with the generated descriptors, so that it
 * knows which fields are nested messages, and reports the first structural
 * error it finds: a truncated tag or varint, a length that runs past the end
 * of its enclosing message, a wire type that does not fit the field, as
 * "byte 1234 (in graph.node.attribute): ...". The walk is only a
 * diagnosis; decoding stays protobuf-c's job.
 */
#include <stdio.h>
#include <string.h>

#include "frontend/onnx_impl.h"

#define WIRE_MAX_DEPTH 100

typedef struct walk {
  const uint8_t *buf;
  char *msg;
  size_t cap;
  char path[256];
} walk;

static bool varint(const uint8_t *buf, size_t end, size_t *pos, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*pos >= end) return false;
    uint8_t b = buf[(*pos)++];
    if (shift < 64) x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

static bool report(walk *w, size_t at, const char *what) {
  snprintf(w->msg, w->cap, "byte %zu (in %s): %s", at, w->path[0] ? w->path : "the top level",
           what);
  return false;
}

/* The wire type a field of this type is written with (2 also for packed repeated scalars). */
static int wire_type_of(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT: return 5;
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE: return 1;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE: return 2;
  default: return 0;
  }
}

/* The packed payload of a repeated scalar: whole elements only. */
static bool walk_packed(walk *w, const ProtobufCFieldDescriptor *f, size_t pos, size_t end) {
  int wt = wire_type_of(f);
  char what[160];
  if (wt == 5 || wt == 1) {
    size_t size = wt == 5 ? 4 : 8;
    if ((end - pos) % size) {
      snprintf(what, sizeof what, "packed field '%s' holds %zu bytes, not a multiple of %zu",
               f->name, end - pos, size);
      return report(w, pos, what);
    }
    return true;
  }
  while (pos < end) {
    size_t at = pos;
    uint64_t v;
    if (!varint(w->buf, end, &pos, &v)) {
      snprintf(what, sizeof what, "packed field '%s': truncated varint", f->name);
      return report(w, at, what);
    }
  }
  return true;
}

static bool walk_msg(walk *w, const ProtobufCMessageDescriptor *d, size_t pos, size_t end,
                     int depth) {
  char what[200];
  if (depth > WIRE_MAX_DEPTH) return report(w, pos, "messages nested more than 100 deep");
  while (pos < end) {
    size_t at = pos;
    uint64_t tag, v;
    if (!varint(w->buf, end, &pos, &tag)) return report(w, at, "truncated field tag");
    unsigned wt = (unsigned)(tag & 7);
    uint64_t num = tag >> 3;
    if (num == 0 || num > 536870911u) return report(w, at, "invalid field number 0");
    const ProtobufCFieldDescriptor *f =
        d ? protobuf_c_message_descriptor_get_field(d, (unsigned)num) : NULL;
    const char *fname = f ? f->name : "an unknown field";
    if (f && wt != (unsigned)wire_type_of(f) &&
        !(wt == 2 && f->label == PROTOBUF_C_LABEL_REPEATED && wire_type_of(f) != 2)) {
      snprintf(what, sizeof what, "field '%s' has wire type %u, its type needs %d", fname, wt,
               wire_type_of(f));
      return report(w, at, what);
    }
    switch (wt) {
    case 0:
      if (!varint(w->buf, end, &pos, &v)) {
        snprintf(what, sizeof what, "field '%s': truncated varint", fname);
        return report(w, at, what);
      }
      break;
    case 1:
    case 5: {
      size_t size = wt == 1 ? 8 : 4;
      if (end - pos < size) {
        snprintf(what, sizeof what, "field '%s' needs %zu bytes, %zu remain", fname, size,
                 end - pos);
        return report(w, at, what);
      }
      pos += size;
      break;
    }
    case 2: {
      if (!varint(w->buf, end, &pos, &v)) {
        snprintf(what, sizeof what, "field '%s': truncated length", fname);
        return report(w, at, what);
      }
      if (v > end - pos) {
        snprintf(what, sizeof what,
                 "field '%s' declares %llu bytes, but only %zu remain before byte %zu "
                 "(truncated file, or a wrong length)",
                 fname, (unsigned long long)v, end - pos, end);
        return report(w, at, what);
      }
      size_t sub_end = pos + (size_t)v;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        size_t plen = strlen(w->path);
        snprintf(w->path + plen, sizeof w->path - plen, "%s%s", plen ? "." : "", f->name);
        if (!walk_msg(w, f->descriptor, pos, sub_end, depth + 1)) return false;
        w->path[plen] = 0;
      } else if (f && wire_type_of(f) != 2 && !walk_packed(w, f, pos, sub_end)) {
        return false;
      }
      pos = sub_end;
      break;
    }
    default:
      snprintf(what, sizeof what, "field %llu has wire type %u, which ONNX files do not use",
               (unsigned long long)num, wt);
      return report(w, at, what);
    }
  }
  return true;
}

void ox_wire_explain(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                     char *msg, size_t cap) {
  walk w = {.buf = buf, .msg = msg, .cap = cap};
  if (walk_msg(&w, desc, 0, len, 0))
    snprintf(msg, cap,
             "protobuf-c rejected its %zu bytes, though their structure is sound (an invalid "
             "value, such as an enum or a bool out of range)",
             len);
}
