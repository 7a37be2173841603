/*
 * onnx_wire.c — the wire format checked before protobuf-c decodes it.
 *
 * protobuf-c's decoder recurses once per nested message with no limit, so a
 * 30 KB file of TypeProtos nested 4,500 deep (or If subgraphs 3,000 deep)
 * overflowed the stack inside onnx__model_proto__unpack (issue 22 item 1).
 * Every buffer of user bytes is therefore walked here first, with the
 * generated descriptors (so that the walk knows which fields are nested
 * messages), at most OX_WIRE_MAX_DEPTH messages deep — protobuf's own
 * default recursion limit. The walk reports the first structural error as
 * "byte 1234 (in graph.node.attribute): ...": nesting past the limit, a
 * truncated tag or varint, a length that runs past the end of its enclosing
 * message, a wire type that does not fit the field. Only bytes that pass go
 * to protobuf-c, which stays the decoder (ox_unpack in onnx.c).
 */
#include <stdio.h>
#include <string.h>

#include "frontend/onnx_impl.h"

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
  if (depth > OX_WIRE_MAX_DEPTH) {
    snprintf(what, sizeof what,
             "messages nested more than %d deep (types, or subgraphs of If, Loop and Scan); "
             "Kiln refuses deeper nesting before decoding",
             OX_WIRE_MAX_DEPTH);
    return report(w, pos, what);
  }
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

bool ox_wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                   char *msg, size_t cap) {
  walk w = {.buf = buf, .msg = msg, .cap = cap};
  return walk_msg(&w, desc, 0, len, 0);
}
