/* Where the Oxen hub is, from one URL.
 *
 * `--oxen-remote` (or $MMH3_OXEN_REMOTE) names a repository the way Oxen's own
 * client names a remote: https://hub.oxen.ai/<namespace>/<repo>. From it come
 * the hub's origin (for /api/ai/... calls: the queue, chat completions) and
 * the repository (for /api/repos/<namespace>/<repo>/... calls: files,
 * workspaces, data frames). A bare origin (https://hub.oxen.ai) is enough for
 * the AI calls; mirroring needs the repository part.
 *
 * Only https is accepted, except plain http to a loopback host (127.0.0.0/8,
 * ::1, localhost), which the tests' fake hub uses. No user:password@, query
 * or fragment: the API key travels in the Authorization header only.
 */
#ifndef MMH3_OXEN_REMOTE_H
#define MMH3_OXEN_REMOTE_H

#include <stdbool.h>

#include "core/error.h"

#define MM_OXEN_DEFAULT_HUB "https://hub.oxen.ai"
#define MM_OXEN_ACCEPT_REMOTE                                                                                     \
    "https://<host>[:port]/<namespace>/<repo> (plain http only to a loopback host), e.g. "                      \
    "https://hub.oxen.ai/alice/h3-renders"

typedef struct mm_oxen_remote {
    char origin[320];    /* scheme://host[:port], no trailing slash */
    char ns[128];        /* "" when the URL names no repository */
    char repo[128];
    char branch[128];    /* the branch results are merged into: "main" */
    bool loopback;       /* plain http allowed */
} mm_oxen_remote;

/* Parses and checks url; 0 or -1 with a message saying what is accepted. */
int mm_oxen_remote_parse(const char *url, mm_oxen_remote *out, mm_error *err);

/* True when the remote names a repository (namespace and name). */
bool mm_oxen_remote_has_repo(const mm_oxen_remote *r);

#endif
