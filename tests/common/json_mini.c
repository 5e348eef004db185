/* A small recursive-descent JSON parser (json_mini.h). */
#include "json_mini.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
  const char* s;
  size_t i;
  int depth;
} parser_t;

static void skip_ws(parser_t* p) {
  while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')
    p->i++;
}

static json_t* node(json_type_t t) {
  json_t* v = calloc(1, sizeof(*v));
  if (v != NULL) v->type = t;
  return v;
}

static json_t* parse_value(parser_t* p);

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char* out, unsigned cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static char* parse_string_raw(parser_t* p) {
  if (p->s[p->i] != '"') return NULL;
  p->i++;
  size_t cap = 16;
  char* out = malloc(cap);
  size_t n = 0;
  if (out == NULL) return NULL;
  for (;;) {
    if (n + 8 >= cap) {
      cap *= 2;
      char* o = realloc(out, cap);
      if (o == NULL) goto fail;
      out = o;
    }
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') {
      p->i++;
      out[n] = '\0';
      return out;
    }
    if (c < 0x20) goto fail; /* includes the terminating NUL */
    if (c != '\\') {
      out[n++] = (char)c;
      p->i++;
      continue;
    }
    char e = p->s[p->i + 1];
    p->i += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out[n++] = e;
        break;
      case 'b':
        out[n++] = '\b';
        break;
      case 'f':
        out[n++] = '\f';
        break;
      case 'n':
        out[n++] = '\n';
        break;
      case 'r':
        out[n++] = '\r';
        break;
      case 't':
        out[n++] = '\t';
        break;
      case 'u': {
        unsigned cp = 0;
        for (int k = 0; k < 4; k++) {
          int h = hexval(p->s[p->i + k]);
          if (h < 0) goto fail;
          cp = cp * 16 + (unsigned)h;
        }
        p->i += 4;
        n += put_utf8(out + n, cp);
        break;
      }
      default:
        goto fail;
    }
  }
fail:
  free(out);
  return NULL;
}

static json_t* parse_number(parser_t* p) {
  const char* s = p->s + p->i;
  size_t k = 0;
  if (s[k] == '-') k++;
  if (s[k] == '0') {
    k++;
  } else if (s[k] >= '1' && s[k] <= '9') {
    while (s[k] >= '0' && s[k] <= '9') k++;
  } else {
    return NULL;
  }
  if (s[k] == '.') {
    k++;
    if (!(s[k] >= '0' && s[k] <= '9')) return NULL;
    while (s[k] >= '0' && s[k] <= '9') k++;
  }
  if (s[k] == 'e' || s[k] == 'E') {
    k++;
    if (s[k] == '+' || s[k] == '-') k++;
    if (!(s[k] >= '0' && s[k] <= '9')) return NULL;
    while (s[k] >= '0' && s[k] <= '9') k++;
  }
  json_t* v = node(JSON_NUMBER);
  if (v == NULL) return NULL;
  v->number = strtod(s, NULL);
  p->i += k;
  return v;
}

static bool add_item(json_t* v, json_t* item, char* key) {
  json_t** items = realloc(v->items, (v->n + 1) * sizeof(*items));
  if (items == NULL) return false;
  v->items = items;
  if (v->type == JSON_OBJECT) {
    char** keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
    if (keys == NULL) return false;
    v->keys = keys;
    v->keys[v->n] = key;
  }
  v->items[v->n++] = item;
  return true;
}

static json_t* parse_container(parser_t* p, bool object) {
  json_t* v = node(object ? JSON_OBJECT : JSON_ARRAY);
  if (v == NULL) return NULL;
  p->i++;
  skip_ws(p);
  char close = object ? '}' : ']';
  if (p->s[p->i] == close) {
    p->i++;
    return v;
  }
  for (;;) {
    char* key = NULL;
    skip_ws(p);
    if (object) {
      key = parse_string_raw(p);
      if (key == NULL) goto fail;
      skip_ws(p);
      if (p->s[p->i] != ':') {
        free(key);
        goto fail;
      }
      p->i++;
    }
    json_t* item = parse_value(p);
    if (item == NULL || !add_item(v, item, key)) {
      free(key);
      json_free(item);
      goto fail;
    }
    skip_ws(p);
    if (p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->s[p->i] == close) {
      p->i++;
      return v;
    }
    goto fail;
  }
fail:
  json_free(v);
  return NULL;
}

static json_t* parse_value(parser_t* p) {
  if (++p->depth > 256) return NULL;
  skip_ws(p);
  json_t* v = NULL;
  const char* s = p->s + p->i;
  if (*s == '{' || *s == '[') {
    v = parse_container(p, *s == '{');
  } else if (*s == '"') {
    char* str = parse_string_raw(p);
    if (str != NULL && (v = node(JSON_STRING)) != NULL)
      v->string = str;
    else
      free(str);
  } else if (strncmp(s, "true", 4) == 0 || strncmp(s, "false", 5) == 0) {
    v = node(JSON_BOOL);
    if (v != NULL) v->boolean = s[0] == 't';
    p->i += s[0] == 't' ? 4 : 5;
  } else if (strncmp(s, "null", 4) == 0) {
    v = node(JSON_NULL);
    p->i += 4;
  } else {
    v = parse_number(p);
  }
  p->depth--;
  return v;
}

json_t* json_parse(const char* text, size_t* err_at) {
  parser_t p = {.s = text};
  json_t* v = parse_value(&p);
  skip_ws(&p);
  if (v != NULL && text[p.i] != '\0') {
    json_free(v);
    v = NULL;
  }
  if (v == NULL && err_at != NULL) *err_at = p.i;
  return v;
}

void json_free(json_t* v) {
  if (v == NULL) return;
  for (size_t i = 0; i < v->n; i++) {
    json_free(v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->string);
  free(v);
}

const json_t* json_get(const json_t* v, const char* key) {
  if (v == NULL || v->type != JSON_OBJECT) return NULL;
  for (size_t i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], key) == 0) return v->items[i];
  return NULL;
}

char* json_read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 4096, n = 0;
  char* buf = malloc(cap);
  while (buf != NULL) {
    if (n + 1 >= cap) {
      char* b = realloc(buf, cap * 2);
      if (b == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    if (got == 0) break;
    n += got;
  }
  fclose(f);
  if (buf != NULL) buf[n] = '\0';
  return buf;
}
