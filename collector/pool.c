/* pool.c: the query pool (see pool.h). One mutex guards the queue and the admission counts;
 * jobs are few and short-lived, so a linear scan of the admitted clients is enough. */
#include "pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct job {
    void (*run)(void *arg, bool cancelled);
    void *arg;
    char client[64];
    struct job *next;
};

struct pa_coll_pool {
    struct pa_coll_pool_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct job *head, *tail;
    char (*admitted)[64]; /* client of each admitted job; "" for a free slot */
    bool stopping;
    pthread_t *threads;
    unsigned nthreads;
};

static _Thread_local int64_t budget_deadline_ns; /* 0: no budget on this thread */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool pa_coll_budget_spent(void) {
    return budget_deadline_ns != 0 && now_ns() > budget_deadline_ns;
}

static void *worker(void *arg) {
    struct pa_coll_pool *p = arg;
    /* Below the HTTP threads: when the CPUs are busy, ingest and health checks go first. */
    setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        struct job *j = p->head;
        if (j == NULL)
            break; /* stopping, and nothing left */
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        bool cancelled = p->stopping;
        pthread_mutex_unlock(&p->lock);
        budget_deadline_ns = p->cfg.budget_ms ? now_ns() + (int64_t)p->cfg.budget_ms * 1000000 : 0;
        j->run(j->arg, cancelled);
        budget_deadline_ns = 0;
        pthread_mutex_lock(&p->lock);
        for (unsigned i = 0; i < p->cfg.max_total; i++)
            if (strcmp(p->admitted[i], j->client) == 0) {
                p->admitted[i][0] = '\0';
                break;
            }
        free(j);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int pa_coll_pool_start(struct pa_coll_pool **out, const struct pa_coll_pool_config *cfg) {
    struct pa_coll_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -1;
    p->cfg = *cfg;
    if (p->cfg.threads == 0)
        p->cfg.threads = 1;
    if (p->cfg.max_total == 0)
        p->cfg.max_total = 1;
    p->admitted = calloc(p->cfg.max_total, sizeof *p->admitted);
    p->threads = calloc(p->cfg.threads, sizeof *p->threads);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (p->admitted == NULL || p->threads == NULL) {
        pa_coll_pool_free(p);
        return -1;
    }
    for (; p->nthreads < p->cfg.threads; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) != 0) {
            pa_coll_pool_free(p);
            return -1;
        }
    *out = p;
    return 0;
}

int pa_coll_pool_submit(struct pa_coll_pool *p, const char *client,
                        void (*run)(void *arg, bool cancelled), void *arg, pa_error *err) {
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        pa_fail(err, "out of memory; retry later");
        return 503;
    }
    j->run = run;
    j->arg = arg;
    snprintf(j->client, sizeof j->client, "%s", *client ? client : "?");
    pthread_mutex_lock(&p->lock);
    unsigned total = 0, mine = 0, slot = p->cfg.max_total;
    for (unsigned i = 0; i < p->cfg.max_total; i++) {
        if (p->admitted[i][0] == '\0') {
            slot = i;
            continue;
        }
        total++;
        mine += strcmp(p->admitted[i], j->client) == 0;
    }
    int status = 0;
    if (p->stopping) {
        pa_fail(err, "the collector is shutting down; retry later");
        status = 503;
    } else if (slot == p->cfg.max_total) {
        pa_fail(err, "busy: %u queries are running or queued (the limit); retry later", total);
        status = 503;
    } else if (mine >= p->cfg.max_per_client) {
        pa_fail(err,
                "busy: %u queries from your address are running or queued (the limit); retry "
                "later",
                mine);
        status = 503;
    } else {
        memcpy(p->admitted[slot], j->client, sizeof j->client);
        if (p->tail)
            p->tail->next = j;
        else
            p->head = j;
        p->tail = j;
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->lock);
    if (status)
        free(j);
    return status;
}

void pa_coll_pool_stop(struct pa_coll_pool *p) {
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
}

void pa_coll_pool_free(struct pa_coll_pool *p) {
    pa_coll_pool_stop(p);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p->admitted);
    free(p);
}
