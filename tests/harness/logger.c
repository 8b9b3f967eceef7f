/* dqplb harness: a printf-style NCCL logger (ncclDebugLogger_t), compiled at test time with the
 * system cc into a small shared object so the harness passes a genuinely variadic C function. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static long counts[8];
/* The text of the first KEPT WARN lines (level 2), so tests can assert which warnings appeared. */
#define KEPT 256
static char warn_text[KEPT][1024];
static long warn_n;

void harness_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  if (fmt == NULL) fmt = "(null fmt)";
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level >= 0 && level < 8) __atomic_fetch_add(&counts[level], 1, __ATOMIC_RELAXED);
  if (level == 2) {
    long i = __atomic_fetch_add(&warn_n, 1, __ATOMIC_RELAXED);
    if (i < KEPT) snprintf(warn_text[i], sizeof warn_text[i], "%s", msg);
  }
  if (level <= 2 || getenv("DQPLB_HARNESS_VERBOSE") != NULL)
    fprintf(stderr, "[plugin L%d flags=%#lx %s:%d] %s\n", level, flags, file ? file : "?", line, msg);
}

long harness_log_count(int level) {
  if (level < 0 || level >= 8) return -1;
  return __atomic_load_n(&counts[level], __ATOMIC_RELAXED);
}

/* WARN line i (0-based, in arrival order) or NULL past the end or the first KEPT. */
const char *harness_warn_text(long i) {
  if (i < 0 || i >= KEPT || i >= __atomic_load_n(&warn_n, __ATOMIC_RELAXED)) return NULL;
  return warn_text[i];
}
