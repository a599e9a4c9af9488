/* The wall clock of a third-party worker, moved by crash-harness ([worker] fake_time;
 * harness/engine/process/_faketime.py). Preloaded into the worker's exec'd process tree.
 *
 * It replaces libfaketime, whose Debian 0.9.10 build the harness preloaded before: its MT
 * build takes a mutex in every clock_gettime, so the child of a fork taken while another
 * thread held it waits forever (an RQ work-horse); its plain build re-reads the offset file
 * into one static buffer from every thread (FAKETIME_NO_CACHE), a data race that killed an
 * RQ worker by SIGSEGV (libfaketime #331, #488, #547). Here the offset is one 64-bit number
 * in a file mapped read-only at load time and read under a sequence counter the harness
 * bumps around each write: no lock, no allocation, nothing to re-read, and a fork inherits
 * the mapping. Only CLOCK_REALTIME and its kin move; monotonic clocks and every sleep stay
 * real, so a timed wait lasts what it says.
 *
 * The file (CRASH_HARNESS_CLOCK_FILE): two little-endian 64-bit words, a sequence number
 * (odd while the harness writes) and the offset in nanoseconds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const volatile int64_t *shared; /* [0] sequence, [1] offset ns */
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static int (*real_sem_timedwait)(sem_t *, const struct timespec *);
static int (*real_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);

static void *next(const char *name, const char *version) {
    void *found = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    return found ? found : dlsym(RTLD_NEXT, name);
}

__attribute__((constructor)) static void fake_clock_init(void) {
    real_clock_gettime = next("clock_gettime", NULL);
    /* the condition variable glibc has had since 2.3.2 (x86-64), not the old ABI's */
    real_cond_timedwait = next("pthread_cond_timedwait", "GLIBC_2.3.2");
    real_sem_timedwait = next("sem_timedwait", NULL);
    real_mutex_timedlock = next("pthread_mutex_timedlock", NULL);
    const char *path = getenv("CRASH_HARNESS_CLOCK_FILE");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *map = mmap(NULL, 2 * sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map != MAP_FAILED)
        shared = map;
}

static int64_t offset_ns(void) {
    if (!shared)
        return 0;
    int64_t value = 0;
    /* a writer that died mid-write leaves the counter odd: read what is there, do not spin */
    for (int tries = 0; tries < 1000; tries++) {
        int64_t before = __atomic_load_n(&shared[0], __ATOMIC_ACQUIRE);
        value = __atomic_load_n(&shared[1], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        int64_t after = __atomic_load_n(&shared[0], __ATOMIC_RELAXED);
        if (before == after && (before & 1) == 0)
            break;
    }
    return value;
}

static int moves(clockid_t clk) {
    return clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI;
}

static int now(clockid_t clk, struct timespec *tp) {
    if (real_clock_gettime) /* the vDSO's fast path */
        return real_clock_gettime(clk, tp);
    /* called before this library's constructor ran (an allocator at start-up) */
    return (int)syscall(SYS_clock_gettime, clk, tp);
}

static void shift(struct timespec *tp, int64_t ns) {
    int64_t total = (int64_t)tp->tv_nsec + ns % 1000000000;
    tp->tv_sec += ns / 1000000000 + total / 1000000000;
    tp->tv_nsec = total % 1000000000;
    if (tp->tv_nsec < 0) {
        tp->tv_nsec += 1000000000;
        tp->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *tp) {
    int rc = now(clk, tp);
    if (rc == 0 && moves(clk))
        shift(tp, offset_ns());
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    if (now(CLOCK_REALTIME, &ts) != 0)
        return -1;
    if (tz)
        ((struct timezone *)tz)->tz_minuteswest = ((struct timezone *)tz)->tz_dsttime = 0;
    struct timeval *volatile out = tv; /* glibc declares it non-null; Linux takes NULL */
    if (out) {
        shift(&ts, offset_ns());
        out->tv_sec = ts.tv_sec;
        out->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (now(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    shift(&ts, offset_ns());
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0)
        return 0;
    return base;
}

/* An absolute deadline on a moved clock is on the fake clock: the kernel measures it on the
 * real one, so it is moved back by the offset. Relative sleeps and monotonic deadlines are
 * the kernel's as they are. */
int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem) {
    struct timespec real = *req;
    if ((flags & TIMER_ABSTIME) && moves(clk))
        shift(&real, -offset_ns());
    long r = syscall(SYS_clock_nanosleep, clk, flags, &real, rem);
    return r == -1 ? errno : 0; /* clock_nanosleep returns the error number */
}

/* Waits with an absolute deadline on CLOCK_REALTIME: a program computes the deadline from its
 * (moved) wall clock, the kernel measures it on the real one, so without this a wait of 0.2 s
 * would last the offset (an hour) too. A condition variable set to CLOCK_MONOTONIC (glibc
 * keeps the clock in bit 0 of __wrefs) is left as it is. */
static struct timespec on_real_clock(const struct timespec *deadline) {
    struct timespec real = *deadline;
    shift(&real, -offset_ns());
    return real;
}

int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                           const struct timespec *deadline) {
    if (!real_cond_timedwait)
        return ENOSYS;
    if (cond->__data.__wrefs & 1)
        return real_cond_timedwait(cond, mutex, deadline);
    struct timespec real = on_real_clock(deadline);
    return real_cond_timedwait(cond, mutex, &real);
}

int sem_timedwait(sem_t *sem, const struct timespec *deadline) {
    if (!real_sem_timedwait) {
        errno = ENOSYS;
        return -1;
    }
    struct timespec real = on_real_clock(deadline);
    return real_sem_timedwait(sem, &real);
}

int pthread_mutex_timedlock(pthread_mutex_t *mutex, const struct timespec *deadline) {
    if (!real_mutex_timedlock)
        return ENOSYS;
    struct timespec real = on_real_clock(deadline);
    return real_mutex_timedlock(mutex, &real);
}
