/* Preloaded before libfaketime by crash-harness ([worker] fake_time; harness/_faketime.py).
 *
 * With FAKETIME_DONT_FAKE_MONOTONIC=1, libfaketime 0.9.10 turns an absolute
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) deadline into a negative one, so Python's
 * time.sleep() fails with EINVAL (libfaketime issue #426). Faking monotonic instead makes
 * every timed lock wait (Event.wait, Thread.join) last as long as the offset (issue #390).
 * So monotonic stays real, and its sleeps go straight to the kernel; every other clock goes
 * on to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int (*next_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem) {
    if (clk == CLOCK_MONOTONIC || clk == CLOCK_MONOTONIC_RAW || clk == CLOCK_BOOTTIME) {
        long r = syscall(SYS_clock_nanosleep, clk, flags, req, rem);
        return r == -1 ? errno : 0; /* clock_nanosleep returns the error number */
    }
    if (!next_clock_nanosleep)
        next_clock_nanosleep = dlsym(RTLD_NEXT, "clock_nanosleep");
    return next_clock_nanosleep(clk, flags, req, rem);
}
