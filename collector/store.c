/* store.c: SQLite persistence with group commit.
 *
 * Durability, thought through: the database runs in WAL mode. A COMMIT appends the
 * transaction's pages to the -wal file with write(2); once write returns, the bytes belong to
 * the kernel and survive the death of this process, kill -9 included. With synchronous=NORMAL
 * that is all SQLite does, so a committed row survives a crash of the collector but not a
 * crash of the machine. With synchronous=FULL (our default) the commit also fsyncs the WAL,
 * so it survives power loss too. Either way the HTTP 200 is queued only after COMMIT returns;
 * the writer thread batches every upload waiting at that moment into one transaction, which is
 * what keeps FULL affordable: one fsync per batch, not per upload. */
#include "store.h"

#include "ingest.h"
#include "profile.h"

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct job {
    const struct pa_coll_upload *u;
    int status;
    pa_error err;
    bool done;
    struct job *next;
};

#define POOL_MAX 16

struct pa_coll_store {
    char *path;
    struct pa_coll_store_options opt;
    sqlite3 *w; /* the writer's connection, used under wlock */
    pthread_mutex_t wlock;
    sqlite3_stmt *ins_series, *ins_upload, *drop_rollup, *add_todo, *ins_id;
    pthread_t compactor;
    bool compactor_started;
    pthread_cond_t compact_wake; /* compactor: stop */

    pthread_mutex_t lock;
    pthread_cond_t wake; /* writer: work arrived or stop */
    pthread_cond_t done; /* submitters: a batch committed */
    struct job *head, *tail;
    bool stop;
    pthread_t writer;

    pthread_mutex_t pool_lock;
    sqlite3 *pool[POOL_MAX];
    int npool;

    int kill_after; /* fault injection: SIGKILL after this many batches commit (0: never) */
};

static int fail(int status, pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return status;
}

static const char *schema =
    /* auto_vacuum must be set before the first table exists to take effect. */
    "PRAGMA auto_vacuum = INCREMENTAL;"
    "CREATE TABLE IF NOT EXISTS series ("
    "  id INTEGER PRIMARY KEY,"
    "  app TEXT NOT NULL,"
    "  labels TEXT NOT NULL,"
    "  first_from INTEGER NOT NULL,"
    "  last_until INTEGER NOT NULL,"
    "  max_span INTEGER NOT NULL,"
    "  uploads INTEGER NOT NULL DEFAULT 0,"
    "  samples INTEGER NOT NULL DEFAULT 0,"
    "  UNIQUE (app, labels));"
    "CREATE TABLE IF NOT EXISTS uploads ("
    "  id INTEGER PRIMARY KEY,"
    "  series_id INTEGER NOT NULL REFERENCES series(id),"
    "  from_s INTEGER NOT NULL,"
    "  until_s INTEGER NOT NULL,"
    "  samples INTEGER NOT NULL,"
    "  stacks INTEGER NOT NULL,"
    "  sample_rate INTEGER NOT NULL,"
    "  spy_name TEXT NOT NULL,"
    "  dropped_lines INTEGER NOT NULL,"
    "  received INTEGER NOT NULL,"
    "  profile BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS uploads_by_series_from ON uploads (series_id, from_s);"
    "CREATE INDEX IF NOT EXISTS uploads_by_until ON uploads (until_s);"
    /* Version 4: rollups over each hour, 10 minutes and minute (span 3600, 600 or 60), and
     * the spans whose rollup is missing or out of date. */
    "CREATE TABLE IF NOT EXISTS rollups ("
    "  series_id INTEGER NOT NULL,"
    "  span INTEGER NOT NULL,"
    "  start_s INTEGER NOT NULL,"
    "  uploads INTEGER NOT NULL,"
    "  samples INTEGER NOT NULL,"
    "  last_id INTEGER NOT NULL,"
    "  profile BLOB NOT NULL,"
    "  PRIMARY KEY (series_id, span, start_s)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rollup_todo ("
    "  series_id INTEGER NOT NULL,"
    "  span INTEGER NOT NULL,"
    "  start_s INTEGER NOT NULL,"
    "  PRIMARY KEY (series_id, span, start_s)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS rollup_todo_by_start ON rollup_todo (start_s);"
    /* The ids of uploads received (a Push RawSample's ID, /ingest's pyagentUploadId, an
     * OTLP profile_id): an upload whose id is here was stored already and is not stored
     * again, which makes a client's resend after a lost answer harmless. Kept as long as
     * uploads are (retention, by time of receipt). Created here, so older databases gain it. */
    "CREATE TABLE IF NOT EXISTS upload_ids ("
    "  id TEXT PRIMARY KEY,"
    "  received INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS upload_ids_by_received ON upload_ids (received);";

/* Rollup tables of an earlier layout (version 2, hourly only, never on a release) are
 * dropped before the schema above creates them anew; they held nothing but derived data. */
static const char *drop_old_rollups = "DROP TABLE IF EXISTS rollups;"
                                      "DROP TABLE IF EXISTS rollup_todo;";

/* A database of an earlier version lacks rollup_todo rows for some levels: every span it
 * holds is marked due (a version-3 database rebuilds its hour and minute rollups once, in the
 * background). Timestamps are never negative, so % is the floor here. */
static const char *upgrade_to_4 =
    "BEGIN IMMEDIATE;"
    "INSERT OR IGNORE INTO rollup_todo SELECT DISTINCT series_id, 3600, from_s - from_s % 3600 "
    "FROM uploads;"
    "INSERT OR IGNORE INTO rollup_todo SELECT DISTINCT series_id, 600, from_s - from_s % 600 "
    "FROM uploads;"
    "INSERT OR IGNORE INTO rollup_todo SELECT DISTINCT series_id, 60, from_s - from_s % 60 "
    "FROM uploads;"
    "PRAGMA user_version = 4;"
    "COMMIT;";

static int open_conn(const char *path, int flags, sqlite3 **db, pa_error *err) {
    int rc = sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, err, "database %s: %s", path, *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    /* Readers may meet the writer in a checkpoint; waiting a little beats failing. */
    sqlite3_busy_timeout(*db, 5000);
    return 0;
}

static int exec(sqlite3 *db, const char *sql, pa_error *err) {
    char *why = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &why) != SQLITE_OK) {
        fail(-1, err, "database: %s", why ? why : sqlite3_errmsg(db));
        sqlite3_free(why);
        return -1;
    }
    return 0;
}

static sqlite3 *reader_get(struct pa_coll_store *st, pa_error *err) {
    sqlite3 *db = NULL;
    pthread_mutex_lock(&st->pool_lock);
    if (st->npool > 0)
        db = st->pool[--st->npool];
    pthread_mutex_unlock(&st->pool_lock);
    if (db == NULL && open_conn(st->path, SQLITE_OPEN_READONLY, &db, err) != 0)
        return NULL;
    return db;
}

static void reader_put(struct pa_coll_store *st, sqlite3 *db) {
    pthread_mutex_lock(&st->pool_lock);
    if (st->npool < POOL_MAX) {
        st->pool[st->npool++] = db;
        db = NULL;
    }
    pthread_mutex_unlock(&st->pool_lock);
    sqlite3_close(db);
}

/* Runs one statement with ?1 bound to v. 0 or -1. */
static int exec_int(sqlite3 *db, const char *sql, int64_t v) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(q, 1, v);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

const int64_t pa_coll_rollup_spans[PA_COLL_ROLLUP_LEVELS] = {3600, 600, 60};

/* The start of the span that an upload starting at t belongs to. */
static int64_t span_start(int64_t t, int64_t span) {
    int64_t r = t % span;
    return t - (r < 0 ? r + span : r);
}

/* Inserts one upload inside the writer's open transaction. An upload whose id, series and
 * time range were seen before (in an earlier transaction or earlier in this one) is a resend:
 * it succeeds without storing anything, and the first body with them is the one kept. */
static int insert_one(struct pa_coll_store *st, const struct pa_coll_upload *u, pa_error *err) {
    sqlite3_stmt *s;
    if (u->id && *u->id) {
        s = st->ins_id;
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, u->id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)time(NULL));
        sqlite3_bind_text(s, 3, u->app, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, u->labels, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 5, u->from);
        sqlite3_bind_int64(s, 6, u->until);
        int rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
            return fail(503, err, "database: %s", sqlite3_errmsg(st->w));
        if (sqlite3_changes(st->w) == 0)
            return 0;
    }
    s = st->ins_series;
    int64_t span = u->until > u->from ? u->until - u->from : 0;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, u->app, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, u->labels, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, u->from);
    sqlite3_bind_int64(s, 4, u->until);
    sqlite3_bind_int64(s, 5, span);
    sqlite3_bind_int64(s, 6, (sqlite3_int64)u->samples);
    if (sqlite3_step(s) != SQLITE_ROW)
        return fail(503, err, "database: %s", sqlite3_errmsg(st->w));
    int64_t series_id = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);

    s = st->ins_upload;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, series_id);
    sqlite3_bind_int64(s, 2, u->from);
    sqlite3_bind_int64(s, 3, u->until);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)u->samples);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)u->stacks);
    sqlite3_bind_int64(s, 6, u->sample_rate);
    sqlite3_bind_text(s, 7, u->spy_name ? u->spy_name : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, (sqlite3_int64)u->dropped_lines);
    sqlite3_bind_int64(s, 9, (sqlite3_int64)time(NULL));
    sqlite3_bind_blob(s, 10, u->profile, (int)u->profile_len, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE)
        return fail(503, err, "database: %s", sqlite3_errmsg(st->w));
    /* The upload's spans: their rollups (if any) no longer cover it, and are due again. */
    for (int i = 0; i < 2; i++) {
        s = i == 0 ? st->drop_rollup : st->add_todo;
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, series_id);
        for (int k = 0; k < PA_COLL_ROLLUP_LEVELS; k++)
            sqlite3_bind_int64(s, 2 + k, span_start(u->from, pa_coll_rollup_spans[k]));
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
            return fail(503, err, "database: %s", sqlite3_errmsg(st->w));
    }
    return 0;
}

/* Commits a batch. If the batch transaction fails as a whole, each job is retried in its own
 * transaction so that one bad row cannot fail its neighbours. */
static void commit_batch(struct pa_coll_store *st, struct job *batch) {
    pa_error err = {""};
    bool ok = exec(st->w, "BEGIN IMMEDIATE", &err) == 0;
    for (struct job *j = batch; ok && j; j = j->next)
        ok = insert_one(st, j->u, &err) == 0;
    if (ok && exec(st->w, "COMMIT", &err) == 0) {
        for (struct job *j = batch; j; j = j->next)
            j->status = 0;
        return;
    }
    exec(st->w, "ROLLBACK", &err);
    for (struct job *j = batch; j; j = j->next) {
        if (exec(st->w, "BEGIN IMMEDIATE", &j->err) != 0) {
            j->status = 503;
            continue;
        }
        j->status = insert_one(st, j->u, &j->err);
        if (j->status == 0 && exec(st->w, "COMMIT", &j->err) != 0)
            j->status = 503;
        if (j->status != 0)
            exec(st->w, "ROLLBACK", &err);
    }
}

static int64_t retention_every(const struct pa_coll_store *st) {
    if (st->opt.retention_every > 0)
        return st->opt.retention_every;
    int64_t every = st->opt.retention / 20;
    return every < 1 ? 1 : every > 60 ? 60 : every;
}

static void *writer_main(void *arg) {
    struct pa_coll_store *st = arg;
    time_t next_retain = time(NULL);
    pthread_mutex_lock(&st->lock);
    for (;;) {
        /* Retention is checked between batches too, so a busy collector still ages out. */
        if (st->opt.retention > 0 && time(NULL) >= next_retain) {
            pthread_mutex_unlock(&st->lock);
            uint64_t deleted;
            pa_coll_store_retain(st, time(NULL), &deleted);
            next_retain = time(NULL) + retention_every(st);
            pthread_mutex_lock(&st->lock);
            continue;
        }
        if (st->head != NULL) {
            struct job *batch = st->head;
            st->head = st->tail = NULL;
            pthread_mutex_unlock(&st->lock);
            pthread_mutex_lock(&st->wlock);
            commit_batch(st, batch);
            pthread_mutex_unlock(&st->wlock);
            /* A crash between COMMIT and the answer, the one a client cannot tell from a lost
             * upload: the tests use it to show that a resend is not stored twice. */
            if (st->kill_after > 0 && --st->kill_after == 0)
                raise(SIGKILL);
            pthread_mutex_lock(&st->lock);
            for (struct job *j = batch; j; j = j->next)
                j->done = true;
            pthread_cond_broadcast(&st->done);
            continue;
        }
        if (st->stop)
            break;
        if (st->opt.retention > 0) {
            struct timespec until = {.tv_sec = next_retain};
            pthread_cond_timedwait(&st->wake, &st->lock, &until);
        } else {
            pthread_cond_wait(&st->wake, &st->lock);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

/* One span's rollup, merged from the uploads that start in it. */
struct span_merge {
    int64_t series_id, span, start;
    int64_t n, samples, last_id; /* what was merged */
    uint8_t *blob;               /* NULL: nothing to store (no uploads, or one unreadable) */
    size_t blob_len;
};

static bool stopping(struct pa_coll_store *st) {
    pthread_mutex_lock(&st->lock);
    bool stop = st->stop;
    pthread_mutex_unlock(&st->lock);
    return stop;
}

/* Merges the uploads of m's span, read through db (a reader: no lock held). 0, -1, or 1 when
 * the store is stopping: a span of a busy hour can hold thousands of uploads, and the
 * collector's stop must not wait for its merge (nothing is stored; the span stays due). */
static int merge_span(struct pa_coll_store *st, sqlite3 *db, struct span_merge *m) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, samples, profile FROM uploads WHERE series_id = ?1 AND "
                           "from_s >= ?2 AND from_s < ?3",
                           -1, &q, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(q, 1, m->series_id);
    sqlite3_bind_int64(q, 2, m->start);
    sqlite3_bind_int64(q, 3, m->start + m->span);
    pa_profile *p = pa_profile_new();
    bool readable = true;
    int rc;
    bool stopped = false;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if ((stopped = stopping(st))) /* a row can be megabytes to parse, at nice 10 */
            break;
        int64_t id = sqlite3_column_int64(q, 0), rs = sqlite3_column_int64(q, 1);
        m->n++;
        m->samples += rs;
        m->last_id = id > m->last_id ? id : m->last_id;
        pa_parse_stats stats;
        pa_error perr = {{0}};
        /* An idle interval adds nothing (and the parser rejects empty input). */
        if (rs > 0 && pa_profile_parse_buffer(p, sqlite3_column_blob(q, 2),
                                              (size_t)sqlite3_column_bytes(q, 2), "stored profile",
                                              &stats, &perr) != 0)
            readable = false;
    }
    sqlite3_finalize(q);
    if (!stopped && rc == SQLITE_DONE && readable && m->n > 0 &&
        pa_coll_profile_blob(p, &m->blob, &m->blob_len) != 0)
        m->blob = NULL;
    pa_profile_free(p);
    return stopped ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/* Stores, in one transaction under the writer's lock, the rollup of each span that still
 * holds exactly the uploads merged (count and largest id; an upload that arrived meanwhile
 * leaves its span due for the next pass), and marks those spans done. A span whose uploads
 * are gone or unreadable is marked done without a rollup: it is read raw. Returns how many
 * rollups were written, or -1. */
static int store_spans(struct pa_coll_store *st, const struct span_merge *m, size_t n) {
    pa_error err = {""};
    int written = 0;
    pthread_mutex_lock(&st->wlock);
    sqlite3_stmt *check = NULL, *put = NULL, *done = NULL;
    bool ok =
        exec(st->w, "BEGIN IMMEDIATE", &err) == 0 &&
        sqlite3_prepare_v2(st->w,
                           "SELECT count(*), coalesce(max(id), 0) FROM uploads WHERE "
                           "series_id = ?1 AND from_s >= ?2 AND from_s < ?3",
                           -1, &check, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(st->w,
                           "INSERT OR REPLACE INTO rollups VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1,
                           &put, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(
            st->w, "DELETE FROM rollup_todo WHERE series_id = ?1 AND span = ?2 AND start_s = ?3",
            -1, &done, NULL) == SQLITE_OK;
    for (size_t i = 0; ok && i < n; i++) {
        sqlite3_reset(check);
        sqlite3_bind_int64(check, 1, m[i].series_id);
        sqlite3_bind_int64(check, 2, m[i].start);
        sqlite3_bind_int64(check, 3, m[i].start + m[i].span);
        bool same = sqlite3_step(check) == SQLITE_ROW && sqlite3_column_int64(check, 0) == m[i].n &&
                    sqlite3_column_int64(check, 1) == m[i].last_id;
        sqlite3_reset(check);
        if (!same)
            continue;
        if (m[i].blob) {
            sqlite3_reset(put);
            sqlite3_bind_int64(put, 1, m[i].series_id);
            sqlite3_bind_int64(put, 2, m[i].span);
            sqlite3_bind_int64(put, 3, m[i].start);
            sqlite3_bind_int64(put, 4, m[i].n);
            sqlite3_bind_int64(put, 5, m[i].samples);
            sqlite3_bind_int64(put, 6, m[i].last_id);
            sqlite3_bind_blob(put, 7, m[i].blob, (int)m[i].blob_len, SQLITE_STATIC);
            ok = sqlite3_step(put) == SQLITE_DONE;
            written += ok;
        }
        sqlite3_reset(done);
        sqlite3_bind_int64(done, 1, m[i].series_id);
        sqlite3_bind_int64(done, 2, m[i].span);
        sqlite3_bind_int64(done, 3, m[i].start);
        ok = ok && sqlite3_step(done) == SQLITE_DONE;
    }
    sqlite3_finalize(check);
    sqlite3_finalize(put);
    sqlite3_finalize(done);
    if (!ok || exec(st->w, "COMMIT", &err) != 0) {
        exec(st->w, "ROLLBACK", &err);
        written = -1;
    }
    pthread_mutex_unlock(&st->wlock);
    return written;
}

#define COMPACT_SLICE 64

/* Moves to the front of m the spans whose newest upload was received at or before `before`
 * and returns how many: the others are still being filled, and a merge now would be thrown
 * away (store_spans' check) or rebuilt soon. They stay due. Sets *status to -1 on an error. */
static size_t quiet_spans(sqlite3 *db, struct span_merge *m, size_t n, int64_t before,
                          int *status) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT coalesce(max(received), 0) FROM uploads WHERE series_id = ?1 "
                           "AND from_s >= ?2 AND from_s < ?3",
                           -1, &q, NULL) != SQLITE_OK) {
        *status = -1;
        return 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, m[i].series_id);
        sqlite3_bind_int64(q, 2, m[i].start);
        sqlite3_bind_int64(q, 3, m[i].start + m[i].span);
        if (sqlite3_step(q) != SQLITE_ROW) {
            *status = -1;
            break;
        }
        if (sqlite3_column_int64(q, 0) <= before) {
            struct span_merge t = m[k];
            m[k++] = m[i];
            m[i] = t;
        }
    }
    sqlite3_finalize(q);
    return k;
}

int pa_coll_store_compact(struct pa_coll_store *st, int64_t now, uint64_t *built) {
    pa_error err = {""};
    *built = 0;
    sqlite3 *db = reader_get(st, &err);
    if (db == NULL)
        return -1;
    int status = 0;
    for (;;) {
        /* A slice at a time: merged without a lock, stored in one transaction (one fsync),
         * so that a large backlog (an upgraded database) is worked through without holding
         * a long read snapshot or the writer. */
        struct span_merge m[COMPACT_SLICE];
        size_t n = 0;
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db,
                               "SELECT series_id, span, start_s FROM rollup_todo WHERE "
                               "start_s <= ?1 - 60 AND start_s + span <= ?1 ORDER BY start_s "
                               "LIMIT 64",
                               -1, &q, NULL) != SQLITE_OK) {
            status = -1;
            break;
        }
        sqlite3_bind_int64(q, 1, now - PA_COLL_ROLLUP_GRACE);
        while (n < COMPACT_SLICE && sqlite3_step(q) == SQLITE_ROW) {
            m[n] = (struct span_merge){.series_id = sqlite3_column_int64(q, 0),
                                       .span = sqlite3_column_int64(q, 1),
                                       .start = sqlite3_column_int64(q, 2)};
            n++;
        }
        sqlite3_finalize(q);
        size_t due = n;
        if (st->opt.rollup_quiet > 0)
            due = quiet_spans(db, m, n, now - st->opt.rollup_quiet, &status);
        for (size_t i = 0; i < due && status == 0; i++)
            status = merge_span(st, db, &m[i]);
        int written = status == 0 ? store_spans(st, m, due) : -1;
        for (size_t i = 0; i < n; i++)
            free(m[i].blob);
        if (status == 1) { /* stopping: the slice stays due for the next start */
            status = 0;
            break;
        }
        if (written < 0) {
            status = -1;
            break;
        }
        *built += (uint64_t)written;
        /* Stop when nothing more is due, or when a slice made no progress (spans still
         * receiving uploads): the next pass retries them. */
        if (n < COMPACT_SLICE || written == 0 || stopping(st))
            break;
    }
    reader_put(st, db);
    return status;
}

static void *compactor_main(void *arg) {
    struct pa_coll_store *st = arg;
    /* Rollups only make queries faster: they wait for ingest, never the other way round. */
    setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        pthread_mutex_unlock(&st->lock);
        uint64_t built;
        pa_coll_store_compact(st, (int64_t)time(NULL), &built);
        pthread_mutex_lock(&st->lock);
        struct timespec until = {.tv_sec = time(NULL) + 10};
        if (!st->stop)
            pthread_cond_timedwait(&st->compact_wake, &st->lock, &until);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

int pa_coll_store_open(struct pa_coll_store **out, const char *path,
                       const struct pa_coll_store_options *opt, pa_error *err) {
    struct pa_coll_store *st = calloc(1, sizeof *st);
    if (st == NULL || (st->path = strdup(path)) == NULL) {
        free(st);
        return fail(-1, err, "out of memory");
    }
    st->opt = *opt;
    const char *fault = getenv("PYAGENT_COLLECTOR_FAULT_KILL_AFTER_COMMITS");
    st->kill_after = fault ? atoi(fault) : 0;
    if (open_conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &st->w, err) != 0)
        goto fail;
    char sync[64];
    snprintf(sync, sizeof sync, "PRAGMA synchronous = %s;",
             opt->sync == PA_SYNC_NORMAL ? "NORMAL" : "FULL");
    /* journal_mode answers with a row; exec ignores it. A database that refuses WAL (e.g. on
     * a network file system) is reported rather than silently run in rollback mode. */
    if (exec(st->w, "PRAGMA journal_mode = WAL;", err) != 0 || exec(st->w, sync, err) != 0)
        goto fail;
    sqlite3_stmt *v;
    int version = 0;
    if (sqlite3_prepare_v2(st->w, "PRAGMA user_version", -1, &v, NULL) == SQLITE_OK) {
        if (sqlite3_step(v) == SQLITE_ROW)
            version = sqlite3_column_int(v, 0);
        sqlite3_finalize(v);
    }
    if ((version == 2 && exec(st->w, drop_old_rollups, err) != 0) ||
        exec(st->w, schema, err) != 0 || (version < 4 && exec(st->w, upgrade_to_4, err) != 0))
        goto fail;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(st->w, "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK) {
        bool wal = sqlite3_step(q) == SQLITE_ROW &&
                   strcmp((const char *)sqlite3_column_text(q, 0), "wal") == 0;
        sqlite3_finalize(q);
        if (!wal) {
            fail(-1, err, "database %s: cannot switch to WAL mode", path);
            goto fail;
        }
    }
    if (sqlite3_prepare_v2(st->w,
                           "INSERT INTO series (app, labels, first_from, last_until, max_span, "
                           "uploads, samples) VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6) "
                           "ON CONFLICT (app, labels) DO UPDATE SET "
                           "first_from = min(first_from, excluded.first_from), "
                           "last_until = max(last_until, excluded.last_until), "
                           "max_span = max(max_span, excluded.max_span), "
                           "uploads = uploads + 1, samples = samples + excluded.samples "
                           "RETURNING id",
                           -1, &st->ins_series, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->w,
                           "INSERT INTO uploads (series_id, from_s, until_s, samples, stacks, "
                           "sample_rate, spy_name, dropped_lines, received, profile) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                           -1, &st->ins_upload, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->w,
                           "DELETE FROM rollups WHERE series_id = ?1 AND ((span = 3600 AND "
                           "start_s = ?2) OR (span = 600 AND start_s = ?3) OR (span = 60 AND "
                           "start_s = ?4))",
                           -1, &st->drop_rollup, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->w,
                           "INSERT OR IGNORE INTO rollup_todo VALUES (?1, 3600, ?2), "
                           "(?1, 600, ?3), (?1, 60, ?4)",
                           -1, &st->add_todo, NULL) != SQLITE_OK ||
        /* The key is the client's id with the upload's series and time range: a resend has
         * all of them the same, and a client that gives every upload one id (a constant, or
         * a counter that restarts) loses nothing that differs in series or time. */
        sqlite3_prepare_v2(st->w,
                           "INSERT OR IGNORE INTO upload_ids VALUES (?1 || x'0a' || ?3 || x'0a' "
                           "|| ?4 || x'0a' || ?5 || x'0a' || ?6, ?2)",
                           -1, &st->ins_id, NULL) != SQLITE_OK) {
        fail(-1, err, "database: %s", sqlite3_errmsg(st->w));
        goto fail;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->wlock, NULL);
    pthread_mutex_init(&st->pool_lock, NULL);
    pthread_cond_init(&st->wake, NULL);
    pthread_cond_init(&st->done, NULL);
    pthread_cond_init(&st->compact_wake, NULL);
    if (pthread_create(&st->writer, NULL, writer_main, st) != 0) {
        fail(-1, err, "cannot start the database writer thread");
        goto fail;
    }
    /* Without it queries stay exact, only slower: no reason to refuse to start. */
    st->compactor_started = pthread_create(&st->compactor, NULL, compactor_main, st) == 0;
    *out = st;
    return 0;
fail:
    sqlite3_finalize(st->ins_series);
    sqlite3_finalize(st->ins_upload);
    sqlite3_finalize(st->drop_rollup);
    sqlite3_finalize(st->add_todo);
    sqlite3_finalize(st->ins_id);
    sqlite3_close(st->w);
    free(st->path);
    free(st);
    return -1;
}

void pa_coll_store_close(struct pa_coll_store *st) {
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_cond_signal(&st->wake);
    pthread_cond_signal(&st->compact_wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->writer, NULL);
    if (st->compactor_started)
        pthread_join(st->compactor, NULL);
    sqlite3_finalize(st->ins_series);
    sqlite3_finalize(st->ins_upload);
    sqlite3_finalize(st->drop_rollup);
    sqlite3_finalize(st->add_todo);
    sqlite3_finalize(st->ins_id);
    for (int i = 0; i < st->npool; i++)
        sqlite3_close(st->pool[i]);
    /* A clean close checkpoints the WAL into the main file and removes it. */
    sqlite3_close(st->w);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->wlock);
    pthread_mutex_destroy(&st->pool_lock);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->done);
    pthread_cond_destroy(&st->compact_wake);
    free(st->path);
    free(st);
}

int pa_coll_store_insert(struct pa_coll_store *st, const struct pa_coll_upload *u, pa_error *err) {
    /* The job lives on this stack frame: safe because this function does not return before
     * the writer has marked it done, and the writer never touches a job after that. */
    struct job j = {.u = u};
    pthread_mutex_lock(&st->lock);
    if (st->stop) {
        pthread_mutex_unlock(&st->lock);
        return fail(503, err, "the collector is shutting down");
    }
    if (st->tail)
        st->tail->next = &j;
    else
        st->head = &j; // cppcheck-suppress autoVariables
    st->tail = &j;     // cppcheck-suppress autoVariables
    pthread_cond_signal(&st->wake);
    while (!j.done)
        pthread_cond_wait(&st->done, &st->lock);
    pthread_mutex_unlock(&st->lock);
    if (j.status != 0 && err)
        *err = j.err;
    return j.status;
}

static int retain_locked(struct pa_coll_store *st, int64_t now, uint64_t *deleted);

int pa_coll_store_retain(struct pa_coll_store *st, int64_t now, uint64_t *deleted) {
    *deleted = 0;
    if (st->opt.retention <= 0)
        return 0;
    pthread_mutex_lock(&st->wlock);
    int rc = retain_locked(st, now, deleted);
    pthread_mutex_unlock(&st->wlock);
    return rc;
}

static int retain_locked(struct pa_coll_store *st, int64_t now, uint64_t *deleted) {
    pa_error err = {""};
    sqlite3_stmt *del;
    /* Deleting in slices keeps each write transaction short, so uploads arriving meanwhile
     * wait for at most one slice. */
    if (sqlite3_prepare_v2(st->w,
                           "DELETE FROM uploads WHERE id IN (SELECT id FROM uploads "
                           "WHERE until_s < ?1 LIMIT 5000)",
                           -1, &del, NULL) != SQLITE_OK)
        return -1;
    int64_t cutoff = now - st->opt.retention;
    /* Rollups of spans that may lose uploads go first (readers then read those uploads raw),
     * and those spans are not rebuilt: they are about to go entirely. */
    /* Ids go by their time of receipt, like the uploads they name: the table holds at most
     * the ids received within the retention period. */
    if (exec_int(st->w, "DELETE FROM rollups WHERE start_s < ?1", cutoff) != 0 ||
        exec_int(st->w, "DELETE FROM rollup_todo WHERE start_s < ?1", cutoff) != 0 ||
        exec_int(st->w, "DELETE FROM upload_ids WHERE received < ?1", cutoff) != 0) {
        sqlite3_finalize(del);
        return -1;
    }
    for (;;) {
        sqlite3_reset(del);
        sqlite3_bind_int64(del, 1, cutoff);
        if (sqlite3_step(del) != SQLITE_DONE)
            break;
        int n = sqlite3_changes(st->w);
        *deleted += (uint64_t)n;
        if (n < 5000)
            break;
    }
    sqlite3_finalize(del);
    if (*deleted == 0)
        return 0;
    /* Series bookkeeping follows the rows that are left. */
    exec(st->w,
         "BEGIN IMMEDIATE;"
         "DELETE FROM series WHERE NOT EXISTS (SELECT 1 FROM uploads WHERE series_id = "
         "series.id);"
         "UPDATE series SET "
         "first_from = (SELECT min(from_s) FROM uploads WHERE series_id = series.id), "
         "uploads = (SELECT count(*) FROM uploads WHERE series_id = series.id), "
         "samples = (SELECT total(samples) FROM uploads WHERE series_id = series.id);"
         "COMMIT;",
         &err);
    exec(st->w, "PRAGMA incremental_vacuum;", &err);
    return 0;
}

static void fill_info(sqlite3_stmt *q, struct pa_coll_series_info *s) {
    s->id = sqlite3_column_int64(q, 0);
    s->app = (const char *)sqlite3_column_text(q, 1);
    s->labels = (const char *)sqlite3_column_text(q, 2);
    s->first_from = sqlite3_column_int64(q, 3);
    s->last_until = sqlite3_column_int64(q, 4);
    s->max_span = sqlite3_column_int64(q, 5);
    s->uploads = (uint64_t)sqlite3_column_int64(q, 6);
    s->samples = (uint64_t)sqlite3_column_int64(q, 7);
}

int pa_coll_store_series(struct pa_coll_store *st, const char *app,
                         int (*fn)(void *ctx, const struct pa_coll_series_info *s), void *ctx,
                         pa_error *err) {
    sqlite3 *db = reader_get(st, err);
    if (db == NULL)
        return -1;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT id, app, labels, first_from, last_until, max_span, "
                                "uploads, samples FROM series WHERE ?1 IS NULL OR app = ?1 "
                                "ORDER BY app, labels",
                                -1, &q, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, err, "database: %s", sqlite3_errmsg(db));
        reader_put(st, db);
        return -1;
    }
    sqlite3_bind_text(q, 1, app, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct pa_coll_series_info s;
        fill_info(q, &s);
        if (fn(ctx, &s) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    int status = 0;
    if (rc != SQLITE_DONE)
        status = fail(-1, err, "database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    reader_put(st, db);
    return status;
}

/* Feeds fn the rows of one statement (columns: from, until, uploads, samples, profile). */
static int feed_rows(sqlite3_stmt *q, int64_t series_id,
                     int (*fn)(void *ctx, const struct pa_coll_row *r), void *ctx, int *rc) {
    int status = 0;
    while ((*rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct pa_coll_row r = {
            .series_id = series_id,
            .from = sqlite3_column_int64(q, 0),
            .until = sqlite3_column_int64(q, 1),
            .uploads = (uint64_t)sqlite3_column_int64(q, 2),
            .samples = (uint64_t)sqlite3_column_int64(q, 3),
            .profile = sqlite3_column_blob(q, 4),
            .profile_len = (size_t)sqlite3_column_bytes(q, 4),
        };
        if ((status = fn(ctx, &r)) != 0)
            return status;
    }
    return 0;
}

/* The spans [first, last) of whole `span`s inside [from, until); first == last when none. */
static void whole_spans(int64_t from, int64_t until, int64_t span, int64_t *first, int64_t *last) {
    *first = span_start(from, span);
    if (*first < from)
        *first += span;
    *last = span_start(until, span);
    if (*last < *first)
        *last = *first;
}

/* SQL for "t lies in a span of level j that the query reads from its rollup": a whole span
 * inside the range (parameters ?(2+2j) and ?(3+2j) bound it) that has a rollup. */
static void read_from_rollup(pa_buf *b, int j, const char *t) {
    long span = (long)pa_coll_rollup_spans[j];
    pa_buf_printf(b,
                  " AND NOT (%s >= ?%d AND %s < ?%d AND EXISTS (SELECT 1 FROM rollups x%d WHERE "
                  "x%d.series_id = ?1 AND x%d.span = %ld AND x%d.start_s = %s - %s %% %ld))",
                  t, 2 + 2 * j, t, 3 + 2 * j, j, j, j, span, j, t, t, span);
}

int pa_coll_store_scan(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                       int64_t from, int64_t until,
                       int (*fn)(void *ctx, const struct pa_coll_row *r), void *ctx,
                       pa_error *err) {
    enum { L = PA_COLL_ROLLUP_LEVELS };
    sqlite3 *db = reader_get(st, err);
    if (db == NULL)
        return -1;
    /* Every upload starting in a span wholly inside [from, until) belongs to the range, so
     * such a span's rollup stands for all of them. Longest spans first: the rollups of the
     * whole hours inside the range, then of the whole 10 minutes not in an hour read so, then
     * of the whole minutes not in either; last the uploads that no rollup read covers, raw.
     * One statement per level plus one, all in one read transaction (one snapshot: a rollup
     * built or dropped between them would count a span twice or not at all). */
    sqlite3_stmt *q[L + 1] = {0};
    int64_t first[L], last[L];
    int rc = exec(db, "BEGIN", err) != 0 ? SQLITE_ERROR : SQLITE_OK;
    for (int k = 0; k <= L && rc == SQLITE_OK; k++) {
        pa_buf sql = {0};
        if (k < L) {
            whole_spans(from, until, pa_coll_rollup_spans[k], &first[k], &last[k]);
            pa_buf_printf(&sql,
                          "SELECT start_s, start_s + span, uploads, samples, profile FROM "
                          "rollups r WHERE series_id = ?1 AND span = %ld AND start_s >= ?%d AND "
                          "start_s < ?%d",
                          (long)pa_coll_rollup_spans[k], 2 + 2 * k, 3 + 2 * k);
        } else {
            /* The index is on (series_id, from_s); max_span turns "ends after from" into a
             * bounded range on from_s. */
            pa_buf_printf(&sql,
                          "SELECT from_s, until_s, 1, samples, profile FROM uploads WHERE "
                          "series_id = ?1 AND from_s >= ?%d - ?%d AND from_s < ?%d AND "
                          "(until_s > ?%d OR from_s >= ?%d)",
                          2 + 2 * L, 4 + 2 * L, 3 + 2 * L, 2 + 2 * L, 2 + 2 * L);
        }
        for (int j = 0; j < k; j++)
            read_from_rollup(&sql, j, k < L ? "r.start_s" : "uploads.from_s");
        pa_buf_puts(&sql, k < L ? " ORDER BY start_s" : " ORDER BY from_s, id");
        rc = sql.data ? sqlite3_prepare_v2(db, sql.data, -1, &q[k], NULL) : SQLITE_NOMEM;
        pa_buf_free(&sql);
    }
    int status = 0;
    if (rc != SQLITE_OK) {
        status = fail(-1, err, "database: %s", sqlite3_errmsg(db));
    } else {
        /* A parameter a statement does not use is simply not bound (SQLITE_RANGE). */
        for (int k = 0; k <= L; k++) {
            sqlite3_bind_int64(q[k], 1, series->id);
            for (int j = 0; j < L; j++) {
                sqlite3_bind_int64(q[k], 2 + 2 * j, first[j]);
                sqlite3_bind_int64(q[k], 3 + 2 * j, last[j]);
            }
        }
        sqlite3_bind_int64(q[L], 2 + 2 * L, from);
        sqlite3_bind_int64(q[L], 3 + 2 * L, until);
        sqlite3_bind_int64(q[L], 4 + 2 * L, series->max_span);
        rc = SQLITE_DONE;
        for (int k = 0; k <= L && status == 0 && rc == SQLITE_DONE; k++)
            status = feed_rows(q[k], series->id, fn, ctx, &rc);
        if (status == 0 && rc != SQLITE_DONE)
            status = fail(-1, err, "database: %s", sqlite3_errmsg(db));
    }
    for (int k = 0; k <= L; k++)
        sqlite3_finalize(q[k]);
    exec(db, "COMMIT", NULL);
    reader_put(st, db);
    return status;
}

int pa_coll_store_timeline(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                           int64_t from, int64_t step, size_t nbuckets, uint64_t *counts,
                           pa_error *err) {
    sqlite3 *db = reader_get(st, err);
    if (db == NULL)
        return -1;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT (from_s - ?2) / ?3, sum(samples) FROM uploads "
                                "WHERE series_id = ?1 AND from_s >= ?2 AND from_s < ?2 + ?3 * ?4 "
                                "GROUP BY 1",
                                -1, &q, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, err, "database: %s", sqlite3_errmsg(db));
        reader_put(st, db);
        return -1;
    }
    sqlite3_bind_int64(q, 1, series->id);
    sqlite3_bind_int64(q, 2, from);
    sqlite3_bind_int64(q, 3, step);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)nbuckets);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(q, 0);
        if (i >= 0 && (size_t)i < nbuckets)
            counts[i] += (uint64_t)sqlite3_column_int64(q, 1);
    }
    int status = 0;
    if (rc != SQLITE_DONE)
        status = fail(-1, err, "database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    reader_put(st, db);
    return status;
}

int pa_coll_store_ingested(struct pa_coll_store *st, const struct pa_coll_ingest_result *res,
                           const char *spy_name, const char *id, pa_error *err) {
    struct pa_coll_upload u = pa_coll_upload_of(res, spy_name);
    u.id = id;
    int status = res->samples || !res->nparts ? pa_coll_store_insert(st, &u, err) : 0;
    for (size_t i = 0; status == 0 && i < res->nparts; i++) {
        const struct pa_coll_ingest_part *part = &res->parts[i];
        char part_id[176] = "";
        if (id && *id)
            snprintf(part_id, sizeof part_id, "%.140s#%zu", id, i + 1);
        u.labels = part->labels;
        u.samples = part->samples;
        u.stacks = part->stacks;
        u.profile = part->blob;
        u.profile_len = part->blob_len;
        u.id = part_id;
        status = pa_coll_store_insert(st, &u, err);
    }
    return status;
}
