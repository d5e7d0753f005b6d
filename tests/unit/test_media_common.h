/* Helpers for the media tests: an independent decode of a file with the
 * FFmpeg libraries (not our readers), ffprobe queries, and temp folders. */
#ifndef MMH3_TESTS_TEST_MEDIA_COMMON_H
#define MMH3_TESTS_TEST_MEDIA_COMMON_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

/* What a full decode of a file found. */
typedef struct decoded_media {
    int ok;
    char error[256];
    char format[64];
    /* video */
    int has_video, width, height;
    AVRational r_frame_rate, avg_frame_rate;
    enum AVColorSpace colorspace;
    char video_codec[32], pix_fmt[32];
    int frames;
    double video_duration; /* stream duration in seconds */
    uint8_t *first_rgb, *last_rgb; /* width*3 stride, BT.709 if tagged */
    /* audio */
    int has_audio, sample_rate, channels;
    char audio_codec[32];
    int64_t samples; /* per channel, decoded (priming removed by the decoder) */
    float *pcm;      /* interleaved float, samples * channels */
    double audio_duration;
} decoded_media;

static inline void decoded_media_free(decoded_media *m)
{
    free(m->first_rgb);
    free(m->last_rgb);
    free(m->pcm);
    memset(m, 0, sizeof *m);
}

static inline int dm_rgb(const AVFrame *f, uint8_t **out)
{
    struct SwsContext *s = sws_getContext(f->width, f->height, f->format, f->width, f->height, AV_PIX_FMT_RGB24,
                                          SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
    if (!s)
        return -1;
    int cs = f->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_ITU601;
    int full = f->color_range == AVCOL_RANGE_JPEG || f->format == AV_PIX_FMT_YUVJ420P;
    sws_setColorspaceDetails(s, sws_getCoefficients(cs), full, sws_getCoefficients(cs), 1, 0, 1 << 16, 1 << 16);
    if (!*out)
        *out = malloc((size_t)f->width * f->height * 3);
    uint8_t *dst[4] = {*out};
    int ds[4] = {f->width * 3};
    sws_scale(s, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, ds);
    sws_freeContext(s);
    return 0;
}

static inline int dm_drain(AVCodecContext *c, AVFrame *f, decoded_media *m, int is_video)
{
    int ret;
    while ((ret = avcodec_receive_frame(c, f)) >= 0) {
        if (is_video) {
            if (m->frames == 0)
                dm_rgb(f, &m->first_rgb);
            dm_rgb(f, &m->last_rgb);
            m->colorspace = f->colorspace;
            m->frames++;
        } else {
            int ch = f->ch_layout.nb_channels, n = f->nb_samples;
            float *p = realloc(m->pcm, (size_t)(m->samples + n) * ch * sizeof *p);
            if (!p)
                return -1;
            m->pcm = p;
            for (int i = 0; i < n; i++)
                for (int k = 0; k < ch; k++) {
                    float v = 0;
                    if (f->format == AV_SAMPLE_FMT_FLTP)
                        v = ((const float *)f->extended_data[k])[i];
                    else if (f->format == AV_SAMPLE_FMT_FLT)
                        v = ((const float *)f->data[0])[i * ch + k];
                    else if (f->format == AV_SAMPLE_FMT_S16)
                        v = ((const int16_t *)f->data[0])[i * ch + k] / 32768.0f;
                    else if (f->format == AV_SAMPLE_FMT_S16P)
                        v = ((const int16_t *)f->extended_data[k])[i] / 32768.0f;
                    p[(m->samples + i) * ch + k] = v;
                }
            m->samples += n;
        }
        av_frame_unref(f);
    }
    return ret == AVERROR(EAGAIN) || ret == AVERROR_EOF ? 0 : ret;
}

/* Decodes every frame and sample of `path`. */
static inline decoded_media decode_media(const char *path)
{
    decoded_media m;
    memset(&m, 0, sizeof m);
    AVFormatContext *fc = NULL;
    AVCodecContext *vc = NULL, *ac = NULL;
    AVPacket *pkt = av_packet_alloc();
    AVFrame *f = av_frame_alloc();
    int vi = -1, ai = -1, ret;
    if ((ret = avformat_open_input(&fc, path, NULL, NULL)) < 0) {
        snprintf(m.error, sizeof m.error, "open: %s", av_err2str(ret));
        goto done;
    }
    avformat_find_stream_info(fc, NULL);
    snprintf(m.format, sizeof m.format, "%s", fc->iformat->name);
    for (unsigned i = 0; i < fc->nb_streams; i++) {
        AVStream *st = fc->streams[i];
        const AVCodec *dec = avcodec_find_decoder(st->codecpar->codec_id);
        if (!dec)
            continue;
        AVCodecContext *c = avcodec_alloc_context3(dec);
        avcodec_parameters_to_context(c, st->codecpar);
        c->pkt_timebase = st->time_base;
        if (avcodec_open2(c, dec, NULL) < 0) {
            avcodec_free_context(&c);
            continue;
        }
        if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && vi < 0) {
            vi = (int)i, vc = c, m.has_video = 1;
            m.width = st->codecpar->width, m.height = st->codecpar->height;
            m.r_frame_rate = st->r_frame_rate, m.avg_frame_rate = st->avg_frame_rate;
            snprintf(m.video_codec, sizeof m.video_codec, "%s", dec->name);
            const char *pf = av_get_pix_fmt_name(st->codecpar->format);
            snprintf(m.pix_fmt, sizeof m.pix_fmt, "%s", pf ? pf : "?");
            if (st->duration != AV_NOPTS_VALUE)
                m.video_duration = st->duration * av_q2d(st->time_base);
        } else if (st->codecpar->codec_type == AVMEDIA_TYPE_AUDIO && ai < 0) {
            ai = (int)i, ac = c, m.has_audio = 1;
            m.sample_rate = st->codecpar->sample_rate, m.channels = st->codecpar->ch_layout.nb_channels;
            snprintf(m.audio_codec, sizeof m.audio_codec, "%s", dec->name);
            if (st->duration != AV_NOPTS_VALUE)
                m.audio_duration = st->duration * av_q2d(st->time_base);
        } else {
            avcodec_free_context(&c);
        }
    }
    while (av_read_frame(fc, pkt) >= 0) {
        if (pkt->stream_index == vi && avcodec_send_packet(vc, pkt) >= 0)
            dm_drain(vc, f, &m, 1);
        else if (pkt->stream_index == ai && avcodec_send_packet(ac, pkt) >= 0)
            dm_drain(ac, f, &m, 0);
        av_packet_unref(pkt);
    }
    if (vc) {
        avcodec_send_packet(vc, NULL);
        dm_drain(vc, f, &m, 1);
    }
    if (ac) {
        avcodec_send_packet(ac, NULL);
        dm_drain(ac, f, &m, 0);
    }
    m.ok = 1;
done:
    avcodec_free_context(&vc);
    avcodec_free_context(&ac);
    avformat_close_input(&fc);
    av_packet_free(&pkt);
    av_frame_free(&f);
    return m;
}

/* Runs `ffprobe -v error <args> <path>` and returns its trimmed stdout
 * (static buffer), or NULL when ffprobe is not installed or fails. */
static inline const char *ffprobe(const char *args, const char *path)
{
    static char out[4096];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "ffprobe -v error %s '%s' 2>/dev/null", args, path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t n = fread(out, 1, sizeof out - 1, p);
    int rc = pclose(p);
    if (rc != 0)
        return NULL;
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
    return out;
}

static inline int have_ffprobe(void) { return system("ffprobe -version >/dev/null 2>&1") == 0; }

static inline int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The release's sample clips (t2va.mp4, i2va.mp4, fl2va.mp4, ref2va.mp4):
 * $MMH3_H3_ASSETS, else shared/minimax-h3/assets beside the checkout
 * ($MMH3_SRC, or the current folder as tests/run leaves it): ../shared where
 * CI clones next to it, ../../shared from a worktree — where tests/e2e/run.sh
 * looks too. They are ours to provide, so their absence is a failure: NULL,
 * with the places looked at in `why`. */
static inline const char *h3_assets_dir(char *why, size_t n)
{
    static char found[1024];
    const char *env = getenv("MMH3_H3_ASSETS");
    if (env && *env) {
        if (file_exists(env))
            return env;
        snprintf(why, n, "MMH3_H3_ASSETS=%s does not exist", env);
        return NULL;
    }
    const char *src = getenv("MMH3_SRC");
    if (!src || !*src)
        src = ".";
    const char *up[] = {"..", "../.."};
    size_t used = (size_t)snprintf(why, n, "the release's sample clips are not in");
    for (int i = 0; i < 2; i++) {
        snprintf(found, sizeof found, "%s/%s/shared/minimax-h3/assets", src, up[i]);
        if (file_exists(found))
            return found;
        if (used < n)
            used += (size_t)snprintf(why + used, n - used, "%s %s", i ? " or" : "", found);
    }
    if (used < n)
        snprintf(why + used, n - used, " (set MMH3_H3_ASSETS)");
    return NULL;
}

/* A fresh folder under $TMPDIR (or /tmp) for one test program. */
static inline const char *test_tmpdir(void)
{
    static char dir[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/mmh3-media-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir;
}

static inline void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof p)
            continue;
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

#endif
