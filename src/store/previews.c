/* Live previews' statements (previews.h). */
#include "store/previews.h"

#include "store/sql.h"

int mm_store_preview_record(PGconn *c, const mm_job *job, const char *worker_id, const mm_store_preview *p, bool *lost,
                            mm_error *err)
{
    mm_db_num a = mm_db_int(job->attempts), seq = mm_db_int(p->seq), step = mm_db_int(p->step),
              total = mm_db_int(p->total_steps), frames = mm_db_int(p->frames), fw = mm_db_int(p->frame_width),
              fh = mm_db_int(p->frame_height);
    const char *v[] = {job->id, worker_id, a.s, seq.s, p->url, step.s, total.s, frames.s, fw.s, fh.s};
    PGresult *r;
    if (mm_db_query(c,
                    "WITH claim AS (SELECT id FROM generations WHERE id = $1 AND worker_id = $2"
                    "                 AND attempts = $3::int AND status = 'processing'),"
                    " up AS (INSERT INTO generation_previews"
                    "          (generation_id, seq, url, step, total_steps, frames, frame_width, frame_height)"
                    "        SELECT id, $4::int, $5, $6::int, $7::int, $8::int, $9::int, $10::int FROM claim"
                    "        ON CONFLICT (generation_id) DO UPDATE SET seq = EXCLUDED.seq, url = EXCLUDED.url,"
                    "          step = EXCLUDED.step, total_steps = EXCLUDED.total_steps, frames = EXCLUDED.frames,"
                    "          frame_width = EXCLUDED.frame_width, frame_height = EXCLUDED.frame_height,"
                    "          updated_at = now()"
                    "        RETURNING *)"
                    " SELECT pg_notify('mmh3_events', json_build_object('kind', 'preview',"
                    "          'generation_id', generation_id, 'seq', seq, 'url', url, 'step', step,"
                    "          'total_steps', total_steps, 'frames', frames, 'frame_width', frame_width,"
                    "          'frame_height', frame_height)::text) FROM up",
                    10, v, &r, err) < 0)
        return mm_error_prefix(err, "storing the preview");
    *lost = PQntuples(r) == 0;
    PQclear(r);
    return 0;
}

int mm_store_preview_clear(PGconn *c, const char *generation_id, mm_error *err)
{
    const char *v[] = {generation_id};
    if (mm_db_query(c, "DELETE FROM generation_previews WHERE generation_id = $1::uuid", 1, v, NULL, err) < 0)
        return mm_error_prefix(err, "removing the preview");
    return 0;
}

int mm_store_preview_stale(PGconn *c, const char *id, bool *stale, mm_error *err)
{
    const char *v[] = {id};
    PGresult *r;
    if (mm_db_query(c, "SELECT NOT EXISTS (SELECT 1 FROM generations WHERE id = $1::uuid AND status = 'processing')",
                    1, v, &r, err) < 0)
        return -1;
    *stale = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}
