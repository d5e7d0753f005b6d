/* The monotonic clock: durations, deadlines, timeouts and rate limits. It
 * never jumps when the wall clock is set, so it says nothing about dates
 * (use time()/clock_gettime(CLOCK_REALTIME) for those). */
#ifndef MMH3_CORE_CLOCK_H
#define MMH3_CORE_CLOCK_H

/* Seconds since an arbitrary point fixed at boot (CLOCK_MONOTONIC). */
double mm_clock_now(void);

/* Sleeps about `seconds` (nothing for seconds <= 0); a signal may end it
 * early, which is what the supervision loops that call it want. */
void mm_clock_sleep(double seconds);

#endif
