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

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct job {
    const struct pa_coll_upload *u;
    int status;
    char msg[256];
    bool done;
    struct job *next;
};

#define POOL_MAX 16

struct pa_coll_store {
    char *path;
    struct pa_coll_store_options opt;
    sqlite3 *w; /* the writer's connection, used under wlock */
    pthread_mutex_t wlock;
    sqlite3_stmt *ins_series, *ins_upload;

    pthread_mutex_t lock;
    pthread_cond_t wake; /* writer: work arrived or stop */
    pthread_cond_t done; /* submitters: a batch committed */
    struct job *head, *tail;
    bool stop;
    pthread_t writer;

    pthread_mutex_t pool_lock;
    sqlite3 *pool[POOL_MAX];
    int npool;
};

static int fail(int status, char *msg, size_t msglen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
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
    "PRAGMA user_version = 1;";

static int open_conn(const char *path, int flags, sqlite3 **db, char *msg, size_t msglen) {
    int rc = sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, msg, msglen, "database %s: %s", path,
             *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    /* Readers may meet the writer in a checkpoint; waiting a little beats failing. */
    sqlite3_busy_timeout(*db, 5000);
    return 0;
}

static int exec(sqlite3 *db, const char *sql, char *msg, size_t msglen) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail(-1, msg, msglen, "database: %s", err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return -1;
    }
    return 0;
}

static sqlite3 *reader_get(struct pa_coll_store *st, char *msg, size_t msglen) {
    sqlite3 *db = NULL;
    pthread_mutex_lock(&st->pool_lock);
    if (st->npool > 0)
        db = st->pool[--st->npool];
    pthread_mutex_unlock(&st->pool_lock);
    if (db == NULL && open_conn(st->path, SQLITE_OPEN_READONLY, &db, msg, msglen) != 0)
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

/* Inserts one upload inside the writer's open transaction. */
static int insert_one(struct pa_coll_store *st, const struct pa_coll_upload *u, char *msg,
                      size_t msglen) {
    sqlite3_stmt *s = st->ins_series;
    int64_t span = u->until > u->from ? u->until - u->from : 0;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, u->app, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, u->labels, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, u->from);
    sqlite3_bind_int64(s, 4, u->until);
    sqlite3_bind_int64(s, 5, span);
    sqlite3_bind_int64(s, 6, (sqlite3_int64)u->samples);
    if (sqlite3_step(s) != SQLITE_ROW)
        return fail(503, msg, msglen, "database: %s", sqlite3_errmsg(st->w));
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
        return fail(503, msg, msglen, "database: %s", sqlite3_errmsg(st->w));
    return 0;
}

/* Commits a batch. If the batch transaction fails as a whole, each job is retried in its own
 * transaction so that one bad row cannot fail its neighbours. */
static void commit_batch(struct pa_coll_store *st, struct job *batch) {
    char msg[256];
    bool ok = exec(st->w, "BEGIN IMMEDIATE", msg, sizeof msg) == 0;
    for (struct job *j = batch; ok && j; j = j->next)
        ok = insert_one(st, j->u, msg, sizeof msg) == 0;
    if (ok && exec(st->w, "COMMIT", msg, sizeof msg) == 0) {
        for (struct job *j = batch; j; j = j->next)
            j->status = 0;
        return;
    }
    exec(st->w, "ROLLBACK", msg, sizeof msg);
    for (struct job *j = batch; j; j = j->next) {
        if (exec(st->w, "BEGIN IMMEDIATE", j->msg, sizeof j->msg) != 0) {
            j->status = 503;
            continue;
        }
        j->status = insert_one(st, j->u, j->msg, sizeof j->msg);
        if (j->status == 0 && exec(st->w, "COMMIT", j->msg, sizeof j->msg) != 0)
            j->status = 503;
        if (j->status != 0)
            exec(st->w, "ROLLBACK", msg, sizeof msg);
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

int pa_coll_store_open(struct pa_coll_store **out, const char *path,
                       const struct pa_coll_store_options *opt, char *msg, size_t msglen) {
    struct pa_coll_store *st = calloc(1, sizeof *st);
    if (st == NULL || (st->path = strdup(path)) == NULL) {
        free(st);
        return fail(-1, msg, msglen, "out of memory");
    }
    st->opt = *opt;
    if (open_conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &st->w, msg, msglen) != 0)
        goto fail;
    char sync[64];
    snprintf(sync, sizeof sync, "PRAGMA synchronous = %s;",
             opt->sync == PA_SYNC_NORMAL ? "NORMAL" : "FULL");
    /* journal_mode answers with a row; exec ignores it. A database that refuses WAL (e.g. on
     * a network file system) is reported rather than silently run in rollback mode. */
    if (exec(st->w, "PRAGMA journal_mode = WAL;", msg, msglen) != 0 ||
        exec(st->w, sync, msg, msglen) != 0 || exec(st->w, schema, msg, msglen) != 0)
        goto fail;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(st->w, "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK) {
        bool wal = sqlite3_step(q) == SQLITE_ROW &&
                   strcmp((const char *)sqlite3_column_text(q, 0), "wal") == 0;
        sqlite3_finalize(q);
        if (!wal) {
            fail(-1, msg, msglen, "database %s: cannot switch to WAL mode", path);
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
                           -1, &st->ins_upload, NULL) != SQLITE_OK) {
        fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(st->w));
        goto fail;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->wlock, NULL);
    pthread_mutex_init(&st->pool_lock, NULL);
    pthread_cond_init(&st->wake, NULL);
    pthread_cond_init(&st->done, NULL);
    if (pthread_create(&st->writer, NULL, writer_main, st) != 0) {
        fail(-1, msg, msglen, "cannot start the database writer thread");
        goto fail;
    }
    *out = st;
    return 0;
fail:
    sqlite3_finalize(st->ins_series);
    sqlite3_finalize(st->ins_upload);
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
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->writer, NULL);
    sqlite3_finalize(st->ins_series);
    sqlite3_finalize(st->ins_upload);
    for (int i = 0; i < st->npool; i++)
        sqlite3_close(st->pool[i]);
    /* A clean close checkpoints the WAL into the main file and removes it. */
    sqlite3_close(st->w);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->wlock);
    pthread_mutex_destroy(&st->pool_lock);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->done);
    free(st->path);
    free(st);
}

int pa_coll_store_insert(struct pa_coll_store *st, const struct pa_coll_upload *u, char *msg,
                         size_t msglen) {
    /* The job lives on this stack frame: safe because this function does not return before
     * the writer has marked it done, and the writer never touches a job after that. */
    struct job j = {.u = u};
    pthread_mutex_lock(&st->lock);
    if (st->stop) {
        pthread_mutex_unlock(&st->lock);
        return fail(503, msg, msglen, "the collector is shutting down");
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
    if (j.status != 0)
        snprintf(msg, msglen, "%s", j.msg);
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
    char msg[256];
    sqlite3_stmt *del;
    /* Deleting in slices keeps each write transaction short, so uploads arriving meanwhile
     * wait for at most one slice. */
    if (sqlite3_prepare_v2(st->w,
                           "DELETE FROM uploads WHERE id IN (SELECT id FROM uploads "
                           "WHERE until_s < ?1 LIMIT 5000)",
                           -1, &del, NULL) != SQLITE_OK)
        return -1;
    int64_t cutoff = now - st->opt.retention;
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
         msg, sizeof msg);
    exec(st->w, "PRAGMA incremental_vacuum;", msg, sizeof msg);
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
                         char *msg, size_t msglen) {
    sqlite3 *db = reader_get(st, msg, msglen);
    if (db == NULL)
        return -1;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT id, app, labels, first_from, last_until, max_span, "
                                "uploads, samples FROM series WHERE ?1 IS NULL OR app = ?1 "
                                "ORDER BY app, labels",
                                -1, &q, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
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
        status = fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    reader_put(st, db);
    return status;
}

int pa_coll_store_scan(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                       int64_t from, int64_t until,
                       int (*fn)(void *ctx, const struct pa_coll_row *r), void *ctx, char *msg,
                       size_t msglen) {
    sqlite3 *db = reader_get(st, msg, msglen);
    if (db == NULL)
        return -1;
    sqlite3_stmt *q;
    /* The index is on (series_id, from_s); max_span turns "ends after from" into a bounded
     * range on from_s. */
    int rc = sqlite3_prepare_v2(db,
                                "SELECT from_s, until_s, samples, profile FROM uploads "
                                "WHERE series_id = ?1 AND from_s >= ?2 - ?4 AND from_s < ?3 "
                                "AND (until_s > ?2 OR from_s >= ?2) ORDER BY from_s, id",
                                -1, &q, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
        reader_put(st, db);
        return -1;
    }
    sqlite3_bind_int64(q, 1, series->id);
    sqlite3_bind_int64(q, 2, from);
    sqlite3_bind_int64(q, 3, until);
    sqlite3_bind_int64(q, 4, series->max_span);
    int status = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct pa_coll_row r = {
            .series_id = series->id,
            .from = sqlite3_column_int64(q, 0),
            .until = sqlite3_column_int64(q, 1),
            .samples = (uint64_t)sqlite3_column_int64(q, 2),
            .profile = sqlite3_column_blob(q, 3),
            .profile_len = (size_t)sqlite3_column_bytes(q, 3),
        };
        if ((status = fn(ctx, &r)) != 0)
            break;
    }
    if (status == 0 && rc != SQLITE_DONE)
        status = fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    reader_put(st, db);
    return status;
}

int pa_coll_store_timeline(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                           int64_t from, int64_t step, size_t nbuckets, uint64_t *counts, char *msg,
                           size_t msglen) {
    sqlite3 *db = reader_get(st, msg, msglen);
    if (db == NULL)
        return -1;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT (from_s - ?2) / ?3, sum(samples) FROM uploads "
                                "WHERE series_id = ?1 AND from_s >= ?2 AND from_s < ?2 + ?3 * ?4 "
                                "GROUP BY 1",
                                -1, &q, NULL);
    if (rc != SQLITE_OK) {
        fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
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
        status = fail(-1, msg, msglen, "database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    reader_put(st, db);
    return status;
}
