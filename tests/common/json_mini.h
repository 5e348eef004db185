/* A small JSON parser for tests that check what the library writes (trace files, RAS status):
 * the whole RFC 8259 grammar, values kept as a tree. Not for untrusted input of any size. */
#ifndef BATON_TEST_JSON_MINI_H
#define BATON_TEST_JSON_MINI_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
  JSON_NULL,
  JSON_BOOL,
  JSON_NUMBER,
  JSON_STRING,
  JSON_ARRAY,
  JSON_OBJECT
} json_type_t;

typedef struct json {
  json_type_t type;
  bool boolean;
  double number;
  char* string;        /* JSON_STRING: unescaped (UTF-8) */
  struct json** items; /* JSON_ARRAY and JSON_OBJECT values */
  char** keys;         /* JSON_OBJECT keys, parallel to items */
  size_t n;
} json_t;

/* Parses text (the whole of it, surrounding blanks allowed); NULL on a syntax error, with the
 * byte offset of the error in *err_at when err_at is not NULL. */
json_t* json_parse(const char* text, size_t* err_at);
void json_free(json_t* v);
/* Member key of an object, NULL when absent or v is not an object. */
const json_t* json_get(const json_t* v, const char* key);
/* Reads a whole file into a NUL-terminated buffer (NULL on failure). */
char* json_read_file(const char* path);

#endif /* BATON_TEST_JSON_MINI_H */
