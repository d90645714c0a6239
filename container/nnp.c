/*
 * iterare-nnp ARGV...: set the calling thread's no_new_privs bit (prctl(2)
 * PR_SET_NO_NEW_PRIVS, Documentation/userspace-api/no_new_privs.rst), then execve(2) ARGV
 * with the same environment; on failure one line on standard error and exit status 127.
 *
 * A swarm task cannot be given no-new-privileges (Engine API 1.41 has no such service
 * option), so the agent's task starts this program first, from a swarm config (see
 * git_iterare/sandbox/swarm_backend.py): the bit is inherited across execve and fork and
 * cannot be cleared, so nothing the project image holds (set-uid programs, a replaced
 * setpriv or shell) can lift it. It is built without libc (static, a few kilobytes: a
 * swarm config holds at most 500 KB, and the project image's libc is not to be trusted).
 */
#include <asm/unistd.h>
#include <linux/prctl.h>

#if defined(__x86_64__)
static long call(long n, long a, long b, long c) {
    long ret;
    register long r10 __asm__("r10") = 0;
    register long r8 __asm__("r8") = 0;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}
__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall start_c\n");
#elif defined(__aarch64__)
static long call(long n, long a, long b, long c) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = 0;
    register long x4 __asm__("x4") = 0;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
                     : "memory");
    return x0;
}
__asm__(".globl _start\n_start:\n\tmov x0, sp\n\tbl start_c\n");
#else
#error "iterare-nnp: no system call glue for this architecture"
#endif

static const char failed[] =
    "iterare-nnp: error: cannot set no_new_privs or start the command\n";

/* The kernel's initial stack: argc, argv[0..argc-1], NULL, envp..., NULL. */
__attribute__((noreturn, used)) void start_c(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    if (argc >= 2 && call(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0) == 0)
        call(__NR_execve, (long)argv[1], (long)(argv + 1), (long)(argv + argc + 1));
    call(__NR_write, 2, (long)failed, sizeof failed - 1);
    for (;;)
        call(__NR_exit_group, 127, 0, 0);
}
