/*
 * xlate_trace: a QEMU TCG plugin that streams every guest load and store (and optionally
 * instruction fetches) of a user-mode guest to xlate as fixed-size binary records.
 *
 * Copyright (C) 2026 the xlate authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * This file is free software: you can redistribute it and/or modify it under the terms of the
 * GNU General Public License as published by the Free Software Foundation, either version 2 of
 * the License, or (at your option) any later version. See LICENSE beside this file.
 *
 * Stream layout (all integers little-endian, host order on the little-endian hosts xlate runs on;
 * docs/tracing.md is the reference):
 *   header, 24 bytes: "XLQTRACE", u32 version (1), u32 record size (24), u32 flags
 *                     (bit 0: fetches recorded), u32 0
 *   then records, 24 bytes each:
 *     u64 vaddr | u64 pc | u32 instrs | u16 vcpu | u8 size | u8 kind
 *   kind 0 load, 1 store, 2 fetch, 0x80 thread start, 0x81 thread exit,
 *   0x82 end of trace (vaddr = number of records written before it), 0x83 the thread calls
 *   execve (if it succeeds the stream ends there: the new program runs outside QEMU).
 *
 * Plugin arguments (-plugin libxlate_trace.so,ARG=VAL,...):
 *   outfd=N      write to the inherited file descriptor N (a pipe, usually)
 *   out=PATH     or create/truncate PATH (a file or a FIFO) and write there
 *   fetches=on   also record instruction fetches (one per new 64-byte code line)
 *   bufrecs=N    records buffered per vCPU before a write (default 32768)
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <qemu-plugin.h>

#if QEMU_PLUGIN_VERSION != 1
#error "xlate_trace is written against QEMU plugin API version 1 (QEMU 7.2); check the header"
#endif

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define XLQ_VERSION 1
#define KIND_LOAD 0
#define KIND_STORE 1
#define KIND_FETCH 2
#define KIND_THREAD_START 0x80
#define KIND_THREAD_EXIT 0x81
#define KIND_END 0x82
#define KIND_EXEC 0x83
#define MAX_VCPUS 4096
#define LINE_SHIFT 6

struct rec {
    uint64_t vaddr;
    uint64_t pc;
    uint32_t instrs;
    uint16_t vcpu;
    uint8_t size;
    uint8_t kind;
};
_Static_assert(sizeof(struct rec) == 24, "record must be 24 bytes");

/* Per-vCPU (= per guest thread in user mode) state, touched only by its own thread except at
 * exit, when QEMU has stopped the others. */
struct vcpu {
    uint64_t icount; /* instructions of every TB entered, this one's included */
    uint64_t last;   /* instruction count at the previous record */
    size_t n;        /* records in buf */
    int exited;
    struct rec *buf;
};

static struct vcpu *vcpus[MAX_VCPUS];
static int out_fd = -1;
static int broken;          /* a write failed or this is a forked child: record nothing more */
static int want_fetches;
static size_t buf_recs = 32768;
/* The target's syscall numbers of thread exit, execve and execveat (-1: unknown). */
static int64_t exit_syscall = -1, execve_syscall = -1, execveat_syscall = -1;
static uint64_t written;          /* records written so far (under out_lock) */
static int live_threads;          /* guest threads started and not exited (atomic) */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/* Static facts about one instruction, packed into the callback's userdata pointer: bit 0 set,
 * size in bits 1-4, instructions left in the TB after this one in bits 5-13, pc above. An
 * instruction that does not fit (pc >= 2^50) gets a heap copy instead (bit 0 clear). */
struct insn_info {
    uint64_t pc;
    uint32_t remaining;
    uint32_t size;
};

static void *pack_insn(uint64_t pc, unsigned remaining, unsigned size)
{
    if (pc < (1ULL << 50) && remaining < 512 && size < 16) {
        return (void *)(uintptr_t)((pc << 14) | ((uint64_t)remaining << 5) | ((uint64_t)size << 1) | 1);
    }
    struct insn_info *p = malloc(sizeof(*p));
    if (!p) {
        abort();
    }
    p->pc = pc;
    p->remaining = remaining;
    p->size = size;
    return p;
}

static inline void unpack_insn(void *ud, uint64_t *pc, unsigned *remaining, unsigned *size)
{
    uintptr_t u = (uintptr_t)ud;
    if (u & 1) {
        *pc = (uint64_t)u >> 14;
        *remaining = (u >> 5) & 511;
        *size = (u >> 1) & 15;
    } else {
        const struct insn_info *p = ud;
        *pc = p->pc;
        *remaining = p->remaining;
        *size = p->size;
    }
}

static void write_all(const void *data, size_t len)
{
    const char *p = data;
    while (len > 0 && !broken) {
        ssize_t k = write(out_fd, p, len);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            broken = 1; /* the reader went away: keep the guest running, record nothing */
            return;
        }
        p += k;
        len -= (size_t)k;
    }
}

/* Writes the vCPU's buffered records in one piece, so streams of several threads interleave
 * only at buffer boundaries and never split a record. */
static void flush_vcpu(struct vcpu *v)
{
    if (v->n == 0) {
        return;
    }
    pthread_mutex_lock(&out_lock);
    if (!broken) {
        write_all(v->buf, v->n * sizeof(struct rec));
        written += v->n;
    }
    pthread_mutex_unlock(&out_lock);
    v->n = 0;
}

static inline void emit(struct vcpu *v, unsigned vcpu_index, uint64_t vaddr, uint64_t pc, uint32_t instrs,
                        unsigned size, unsigned kind)
{
    struct rec *r = &v->buf[v->n];
    r->vaddr = vaddr;
    r->pc = pc;
    r->instrs = instrs;
    r->vcpu = (uint16_t)vcpu_index;
    r->size = (uint8_t)size;
    r->kind = (uint8_t)kind;
    if (++v->n == buf_recs) {
        flush_vcpu(v);
    }
}

/* Instructions retired since the previous record, up to and including the instruction with
 * `remaining` instructions after it in the current TB. */
static inline uint32_t take_instrs(struct vcpu *v, unsigned remaining)
{
    uint64_t now = v->icount - remaining;
    uint64_t d = now - v->last;
    v->last = now;
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

static void tb_exec(unsigned int vcpu_index, void *ud)
{
    vcpus[vcpu_index]->icount += (uintptr_t)ud;
}

static void mem_access(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr, void *ud)
{
    struct vcpu *v = vcpus[vcpu_index];
    uint64_t pc;
    unsigned remaining, isize;
    unpack_insn(ud, &pc, &remaining, &isize);
    emit(v, vcpu_index, vaddr, pc, take_instrs(v, remaining), 1u << qemu_plugin_mem_size_shift(info),
         qemu_plugin_mem_is_store(info) ? KIND_STORE : KIND_LOAD);
}

static void insn_fetch(unsigned int vcpu_index, void *ud)
{
    struct vcpu *v = vcpus[vcpu_index];
    uint64_t pc;
    unsigned remaining, isize;
    unpack_insn(ud, &pc, &remaining, &isize);
    emit(v, vcpu_index, pc, pc, take_instrs(v, remaining), isize, KIND_FETCH);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t prev_line = UINT64_MAX;
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        unsigned size = (unsigned)qemu_plugin_insn_size(insn);
        void *ud = pack_insn(pc, (unsigned)(n - 1 - i), size);
        if (want_fetches && (pc >> LINE_SHIFT) != prev_line) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, insn_fetch, QEMU_PLUGIN_CB_NO_REGS, ud);
        }
        prev_line = (pc + size - 1) >> LINE_SHIFT;
        /* Registered on every instruction; QEMU only calls it for those that access memory. */
        qemu_plugin_register_vcpu_mem_cb(insn, mem_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, ud);
    }
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu_index)
{
    (void)id;
    if (vcpu_index >= MAX_VCPUS) {
        fprintf(stderr, "xlate_trace: more than %d simultaneous guest threads\n", MAX_VCPUS);
        abort();
    }
    struct vcpu *v = vcpus[vcpu_index];
    if (!v) {
        v = calloc(1, sizeof(*v));
        if (!v || !(v->buf = malloc(buf_recs * sizeof(struct rec)))) {
            fprintf(stderr, "xlate_trace: out of memory\n");
            abort();
        }
        vcpus[vcpu_index] = v;
    }
    /* QEMU reuses the index of a thread that exited for the next new one. */
    v->icount = v->last = 0;
    v->n = 0;
    v->exited = 0;
    __atomic_add_fetch(&live_threads, 1, __ATOMIC_RELAXED);
    emit(v, vcpu_index, 0, 0, 0, 0, KIND_THREAD_START);
    flush_vcpu(v);
}

static void thread_exit(struct vcpu *v, unsigned vcpu_index)
{
    if (!v->exited) {
        emit(v, vcpu_index, 0, 0, 0, 0, KIND_THREAD_EXIT);
        v->exited = 1;
        __atomic_sub_fetch(&live_threads, 1, __ATOMIC_RELAXED);
    }
    flush_vcpu(v);
}

static void vcpu_syscall(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1, uint64_t a2,
                         uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8)
{
    (void)id, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8;
    /* QEMU 7.2 user mode calls no vCPU-exit hook, so a thread's end is seen at its exit
     * syscall (for the last thread, the atexit callback follows). */
    if (num == exit_syscall) {
        thread_exit(vcpus[vcpu_index], vcpu_index);
    } else if (num == execve_syscall || num == execveat_syscall) {
        /* A successful exec replaces QEMU without running the atexit callback: hand over this
         * thread's records now. (Other threads' unflushed records die with them.) */
        struct vcpu *v = vcpus[vcpu_index];
        emit(v, vcpu_index, 0, 0, 0, 0, KIND_EXEC);
        flush_vcpu(v);
    } else if (__atomic_load_n(&live_threads, __ATOMIC_RELAXED) > 1) {
        /* With several threads, a system call may block (a lock, a join): hand over what this
         * thread did so far, so the reader does not wait for records held back here. */
        flush_vcpu(vcpus[vcpu_index]);
    }
}

static void at_exit(qemu_plugin_id_t id, void *ud)
{
    (void)id, (void)ud;
    for (unsigned i = 0; i < MAX_VCPUS; i++) {
        if (vcpus[i] && !vcpus[i]->exited) {
            thread_exit(vcpus[i], i);
        }
    }
    struct rec end = {.vaddr = written, .kind = KIND_END};
    pthread_mutex_lock(&out_lock);
    if (!broken) {
        write_all(&end, sizeof(end));
    }
    pthread_mutex_unlock(&out_lock);
    if (out_fd >= 0) {
        close(out_fd);
    }
    out_fd = -1;
}

/* A guest fork() forks QEMU: the child carries this plugin's state and the stream's descriptor.
 * Only the original process is traced; the child drops its records. */
static void forked_child(void)
{
    broken = 1;
    if (out_fd >= 0) {
        close(out_fd);
        out_fd = -1;
    }
}

static void syscalls_of(const char *target)
{
    if (!strcmp(target, "x86_64")) {
        exit_syscall = 60, execve_syscall = 59, execveat_syscall = 322;
    } else if (!strcmp(target, "aarch64") || !strcmp(target, "riscv64") || !strcmp(target, "riscv32") ||
               !strcmp(target, "loongarch64")) {
        exit_syscall = 93, execve_syscall = 221, execveat_syscall = 281;
    } else if (!strcmp(target, "i386")) {
        exit_syscall = 1, execve_syscall = 11, execveat_syscall = 358;
    } else if (!strcmp(target, "arm")) {
        exit_syscall = 1, execve_syscall = 11, execveat_syscall = 387;
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    const char *path = NULL;
    if (info->system_emulation) {
        fprintf(stderr, "xlate_trace: user-mode QEMU only (qemu-x86_64 and friends)\n");
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "xlate_trace: argument `%s` is not KEY=VALUE\n", argv[i]);
            return -1;
        }
        *eq = '\0';
        const char *key = argv[i], *val = eq + 1;
        bool b;
        if (!strcmp(key, "outfd")) {
            out_fd = atoi(val);
        } else if (!strcmp(key, "out")) {
            path = val;
        } else if (!strcmp(key, "fetches")) {
            if (!qemu_plugin_bool_parse(key, val, &b)) {
                fprintf(stderr, "xlate_trace: fetches=%s: expected on or off\n", val);
                return -1;
            }
            want_fetches = b;
        } else if (!strcmp(key, "bufrecs")) {
            long k = atol(val);
            if (k < 1) {
                fprintf(stderr, "xlate_trace: bufrecs=%s: expected a positive count\n", val);
                return -1;
            }
            buf_recs = (size_t)k;
        } else {
            fprintf(stderr, "xlate_trace: unknown argument `%s` (expected outfd, out, fetches, bufrecs)\n", key);
            return -1;
        }
    }
    if (path) {
        out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out_fd < 0) {
            fprintf(stderr, "xlate_trace: cannot open %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    if (out_fd < 0 || fcntl(out_fd, F_GETFD) < 0) {
        fprintf(stderr, "xlate_trace: needs outfd=N (an open descriptor) or out=PATH\n");
        return -1;
    }
    /* Programs the guest execs run natively, outside QEMU: they must not hold the stream open. */
    fcntl(out_fd, F_SETFD, FD_CLOEXEC);
    pthread_atfork(NULL, NULL, forked_child);
    syscalls_of(info->target_name);

    uint32_t header[6];
    memcpy(header, "XLQTRACE", 8);
    header[2] = XLQ_VERSION;
    header[3] = sizeof(struct rec);
    header[4] = want_fetches ? 1 : 0;
    header[5] = 0;
    write_all(header, sizeof(header));

    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, vcpu_syscall);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
