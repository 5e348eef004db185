/* Shared by the test plugins: append one line to the file named by BATON_PLUGIN_LOG ("<pid>
 * <kind> <what it saw>"); the tests read it back. Header-only, so each plugin stands alone. */
#ifndef BATON_TEST_PLUGIN_LOG_H
#define BATON_TEST_PLUGIN_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void plugin_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void plugin_log(const char* fmt, ...) {
  const char* path = getenv("BATON_PLUGIN_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%d ", (int)getpid()); /* ranks share the file: lines start with their pid */
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

#endif
