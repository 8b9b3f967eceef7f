/* dqplb test logger: the ncclDebugLogger_t NCCL hands to a plugin's init() (ncclDebugLog,
 * src/debug.cc), a real variadic C function, compiled at test time with the system cc into
 * dqplb-logger.so (src/logger.rs). It counts messages per level, keeps the text of the first
 * KEPT WARNs, prints WARN (and lower levels) to stderr, every level when DQPLB_HARNESS_VERBOSE
 * or DQPLB_EMU_VERBOSE is set, and, when DQPLB_EMU_LOG_FILE is set, appends "<level> <text>" to
 * that file plus ".<pid>". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long counts[8];
#define KEPT 256
static char warn_text[KEPT][1024];
static long warn_n;

void dqplb_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(null fmt)", ap);
  va_end(ap);
  if (level >= 0 && level < 8) __atomic_fetch_add(&counts[level], 1, __ATOMIC_SEQ_CST);
  if (level == 2) {
    long i = __atomic_fetch_add(&warn_n, 1, __ATOMIC_SEQ_CST);
    if (i < KEPT) snprintf(warn_text[i], sizeof warn_text[i], "%s", msg);
  }
  if (level <= 2 || getenv("DQPLB_HARNESS_VERBOSE") || getenv("DQPLB_EMU_VERBOSE"))
    fprintf(stderr, "[plugin L%d flags=%#lx %s:%d] %s\n", level, flags, file ? file : "?", line, msg);
  const char *path = getenv("DQPLB_EMU_LOG_FILE");
  if (path && *path) {
    char name[4096];
    snprintf(name, sizeof name, "%s.%d", path, (int)getpid());
    FILE *f = fopen(name, "a");
    if (f) {
      fprintf(f, "%d %s\n", level, msg);
      fclose(f);
    }
  }
}

/* Messages logged at `level` so far; -1 for a level outside 0..7. */
long dqplb_log_count(int level) {
  if (level < 0 || level >= 8) return -1;
  return __atomic_load_n(&counts[level], __ATOMIC_SEQ_CST);
}

/* WARN i (0-based, in arrival order), or NULL past the last one or the first KEPT. */
const char *dqplb_warn_text(long i) {
  if (i < 0 || i >= KEPT || i >= __atomic_load_n(&warn_n, __ATOMIC_SEQ_CST)) return NULL;
  return warn_text[i];
}
