/* dqplb NCCL emulator: the logger NCCL passes to init() (ncclDebugLog, src/debug.cc), a real
 * variadic C function; it counts messages per level, prints WARN and above to stderr and, when
 * DQPLB_EMU_LOG_FILE is set, appends every message to that file plus ".<pid>" (for tests). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long emu_counts[8];

void emu_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char text[4096];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt ? fmt : "(null)", args);
  va_end(args);
  if (level >= 0 && level < 8) __atomic_add_fetch(&emu_counts[level], 1, __ATOMIC_SEQ_CST);
  if (level == 2 || getenv("DQPLB_EMU_VERBOSE"))
    fprintf(stderr, "[emu plugin-log level=%d flags=0x%lx %s:%d] %s\n", level, flags,
            file ? file : "-", line, text);
  const char *path = getenv("DQPLB_EMU_LOG_FILE");
  if (path && *path) {
    char name[4096];
    snprintf(name, sizeof name, "%s.%d", path, (int)getpid());
    FILE *f = fopen(name, "a");
    if (f) {
      fprintf(f, "%d %s\n", level, text);
      fclose(f);
    }
  }
}

long emu_log_count(int level) {
  return (level >= 0 && level < 8) ? __atomic_load_n(&emu_counts[level], __ATOMIC_SEQ_CST) : -1;
}
