/* Progress display of `mmh3 generate` (see generate_progress.h). */
#include "cli/generate_progress.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/device.h"
#include "engine/timing.h"

/* ------------------------------------------------------------------ NVML */

/* The few NVML entry points used, by their stable C ABI (nvml.h is not a
 * build dependency; the library is opened only if the driver installed it). */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned index, void **dev);
typedef int (*nvml_temp_fn)(void *dev, int sensor, unsigned *temp);
typedef struct {
    unsigned gpu, memory;
} nvml_util;
typedef int (*nvml_util_fn)(void *dev, nvml_util *u);
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef int (*nvml_mem_fn)(void *dev, nvml_memory *m);

static struct {
    pthread_once_t once;
    bool ok;
    nvml_handle_fn handle;
    nvml_temp_fn temp;
    nvml_util_fn util;
    nvml_mem_fn mem;
} nvml = {.once = PTHREAD_ONCE_INIT};

static void nvml_open(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml.handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml.temp = (nvml_temp_fn)dlsym(lib, "nvmlDeviceGetTemperature");
    nvml.util = (nvml_util_fn)dlsym(lib, "nvmlDeviceGetUtilizationRates");
    nvml.mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nvml.ok = init && nvml.handle && nvml.temp && nvml.util && nvml.mem && init() == 0;
}

int mm_gpu_stats_get(int index, mm_gpu_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_once(&nvml.once, nvml_open);
    void *dev;
    if (!nvml.ok || nvml.handle((unsigned)index, &dev) != 0)
        return -1;
    nvml_util u = {0};
    nvml_memory m = {0};
    if (nvml.temp(dev, 0 /* NVML_TEMPERATURE_GPU */, &out->temperature_c) != 0 || nvml.util(dev, &u) != 0 ||
        nvml.mem(dev, &m) != 0)
        return -1;
    out->utilization_pct = u.gpu;
    out->memory_used = m.used;
    out->memory_total = m.total;
    return 0;
}

/* ------------------------------------------------------------------ view */

static const char *stage_title(mm_stage s)
{
    switch (s) {
    case MM_STAGE_LOADING: return "loading weights";
    case MM_STAGE_ENCODING_PROMPT: return "encoding prompt";
    case MM_STAGE_ENCODING_REFERENCES: return "encoding references";
    case MM_STAGE_DENOISING: return "denoising";
    case MM_STAGE_DECODING_VIDEO: return "decoding video";
    case MM_STAGE_DECODING_AUDIO: return "decoding audio";
    case MM_STAGE_WRITING: return "writing mp4";
    default: return mm_stage_name(s);
    }
}

static void draw(mm_progress_view *v, double now);

static void *tick_main(void *arg)
{
    mm_progress_view *v = arg;
    for (;;) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&v->lock);
        bool stop = v->stop;
        double now = mm_timing_now();
        if (!stop && v->line_open && now - v->last_draw > 0.2)
            draw(v, now);
        pthread_mutex_unlock(&v->lock);
        if (stop)
            return NULL;
    }
}

void mm_progress_view_init(mm_progress_view *v, mm_progress_mode mode, FILE *out, mm_device gpu, double t0)
{
    memset(v, 0, sizeof *v);
    v->mode = mode;
    v->out = out;
    v->gpu = gpu;
    v->t0 = t0;
    v->stage = MM_STAGE_QUEUED;
    pthread_mutex_init(&v->lock, NULL);
    if (mode == MM_PROGRESS_BARS)
        v->ticking = pthread_create(&v->ticker, NULL, tick_main, v) == 0;
}

/* " VRAM 45.2/139.8 GiB, 71°C, 98%" or " RSS 2.1 GiB" */
static void memory_note(const mm_progress_view *v, char *buf, size_t n)
{
    buf[0] = '\0';
    if (v->gpu.kind == MM_DEVICE_CUDA) {
        mm_gpu_stats g;
        mm_memory_stats ms;
        if (mm_gpu_stats_get(v->gpu.index, &g) == 0)
            snprintf(buf, n, "  VRAM %.1f/%.1f GiB  %u°C  %u%%", g.memory_used / 1073741824.0,
                     g.memory_total / 1073741824.0, g.temperature_c, g.utilization_pct);
        else if (mm_device_memory_stats(v->gpu, &ms) == 0)
            snprintf(buf, n, "  VRAM %.1f GiB", ms.in_use / 1073741824.0);
        return;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        snprintf(buf, n, "  RSS peak %.2f GiB", ru.ru_maxrss / 1048576.0);
}

static void draw(mm_progress_view *v, double now)
{
    char line[320], mem[96], bar[32];
    double in_stage = now - v->stage_t0;
    int done = v->stage == MM_STAGE_DENOISING ? v->step : v->sub_done;
    int total = v->stage == MM_STAGE_DENOISING ? v->total : v->sub_total;
    memory_note(v, mem, sizeof mem);
    if (total > 0) {
        int width = 24, fill = (int)((double)done / total * width + 0.5);
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        if (v->stage == MM_STAGE_DENOISING && done > 0) {
            double per = in_stage / done;
            snprintf(line, sizeof line, "%-20s [%s] %d/%d  %.2f s/step  ETA %.0fs%s", stage_title(v->stage), bar, done,
                     total, per, per * (total - done), mem);
        } else {
            snprintf(line, sizeof line, "%-20s [%s] %d/%d  %.1fs%s", stage_title(v->stage), bar, done, total, in_stage,
                     mem);
        }
    } else {
        snprintf(line, sizeof line, "%-20s %.1fs%s", stage_title(v->stage), in_stage, mem);
    }
    fprintf(v->out, "\r\033[K%s", line);
    fflush(v->out);
    v->line_open = true;
    v->last_draw = now;
}

static void plain(mm_progress_view *v, double now, const char *what)
{
    fprintf(v->out, "[%7.1fs] %s\n", now - v->t0, what);
    fflush(v->out);
}

static void end_stage(mm_progress_view *v, double now)
{
    if (v->mode == MM_PROGRESS_BARS && v->stage != MM_STAGE_QUEUED) {
        draw(v, now);
        fprintf(v->out, "\n");
        v->line_open = false;
    }
}

static void update_locked(mm_progress_view *v, const mm_progress *p);

void mm_progress_view_update(void *user, const mm_progress *p)
{
    mm_progress_view *v = user;
    if (v->mode == MM_PROGRESS_QUIET)
        return;
    pthread_mutex_lock(&v->lock);
    update_locked(v, p);
    pthread_mutex_unlock(&v->lock);
}

static void update_locked(mm_progress_view *v, const mm_progress *p)
{
    double now = mm_timing_now();
    char what[200];
    if (p->stage != v->stage) {
        end_stage(v, now);
        v->stage = p->stage;
        v->stage_t0 = now;
        v->sub_done = v->sub_total = 0;
        v->step = p->step;
        v->total = p->total_steps;
        v->last_step_t = now;
        if (v->mode == MM_PROGRESS_PLAIN) {
            snprintf(what, sizeof what, "%s", stage_title(p->stage));
            plain(v, now, what);
        } else {
            draw(v, now);
        }
        return;
    }
    if (p->step != v->step || p->total_steps != v->total) {
        double step_s = now - v->last_step_t;
        v->step = p->step;
        v->total = p->total_steps;
        v->last_step_t = now;
        if (v->mode == MM_PROGRESS_PLAIN && p->stage == MM_STAGE_DENOISING && p->step > 0) {
            char mem[96];
            memory_note(v, mem, sizeof mem);
            snprintf(what, sizeof what, "denoising step %d/%d (%.2f s)%s", p->step, p->total_steps, step_s, mem);
            plain(v, now, what);
            return;
        }
    }
    if (v->mode == MM_PROGRESS_BARS && (now - v->last_draw > 0.1 || p->step == p->total_steps))
        draw(v, now);
}

void mm_progress_view_stage(void *user, mm_stage stage, int done, int total)
{
    mm_progress_view *v = user;
    if (v->mode != MM_PROGRESS_BARS)
        return;
    pthread_mutex_lock(&v->lock);
    if (stage == v->stage) {
        v->sub_done = done;
        v->sub_total = total;
        double now = mm_timing_now();
        if (now - v->last_draw > 0.1 || done == total)
            draw(v, now);
    }
    pthread_mutex_unlock(&v->lock);
}

void mm_progress_view_finish(mm_progress_view *v)
{
    if (v->ticking) {
        pthread_mutex_lock(&v->lock);
        v->stop = true;
        pthread_mutex_unlock(&v->lock);
        pthread_join(v->ticker, NULL);
        v->ticking = false;
    }
    if (v->mode == MM_PROGRESS_BARS)
        end_stage(v, mm_timing_now());
    v->stage = MM_STAGE_QUEUED;
}

void mm_progress_view_line(mm_progress_view *v, const char *line)
{
    if (v->mode == MM_PROGRESS_QUIET)
        return;
    pthread_mutex_lock(&v->lock);
    if (v->line_open)
        fprintf(v->out, "\r\033[K");
    fprintf(v->out, "%s\n", line);
    if (v->line_open)
        draw(v, mm_timing_now());
    fflush(v->out);
    pthread_mutex_unlock(&v->lock);
}
