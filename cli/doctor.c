/* doctor.c — `sockswitch doctor`: checks this host and this environment for
 * what the switch needs (library, configuration, memfd, eventfd, the
 * per-namespace rendezvous, Cross Memory Attach, limits, the providers built
 * in, libfabric) and says
 * what will and will not be switched.  Exit 1 when the switch cannot work. */
#include "cli.h"
#include "json.h"
#include "libpath.h"

#include "common/params.h"
#include "common/sys.h"
#include "common/waitpol.h"

#ifdef SSW_WITH_FABRIC
#include "providers/fabric/fab_probe.h"
#endif
#include "switch/route/providers.h"
#include "switch/route/route.h"
#include "switch/stat/statreg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define FDS_PER_CONN 2        /* the app's socket + the rendezvous socket, also the doorbell (README) */
#define MAPS_PER_CONN 1
#define RING_DEFAULT_KIB 512

void doctor_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch doctor [--json] [--conf FILE] [--routes RULES]\n"
		"\n"
		"Checks this host, this user and this environment for what the switch needs\n"
		"and says what will and will not be switched:\n"
		"  library        libsockswitch.so is found (as `sockswitch run` looks for it)\n"
		"  configuration  SOCKSWITCH_CONF / SOCKSWITCH_ROUTES and tunables are valid\n"
		"  memfd, eventfd shared memory segments and wake-ups can be created\n"
		"  rendezvous     abstract Unix sockets work in this network namespace\n"
		"  CMA            Cross Memory Attach (process_vm_readv) between two processes\n"
		"                 of this user (used by a requested rendezvous; off by default)\n"
		"  limits         open files and memory maps per process: switched connections\n"
		"  providers      which are built into this sockswitch and its library\n"
		"                 (a build without libfabric's headers has no fabric)\n"
		"  libfabric      its providers found here, and which can carry the fabric\n"
		"                 provider (FI_EP_MSG with FI_MSG and FI_RMA)\n"
		"  namespace      this network namespace (connections switch only inside one)\n"
		"  stat registry  where `sockswitch stat` finds the programs\n"
		"Each line starts with ok, warn (works, with a limitation) or FAIL.\n"
		"\n"
		"options:\n"
		"  --json          one JSON object: can_work, failures, warnings, checks\n"
		"                  [{level (ok|warn|fail|info), check, message}]\n"
		"  --conf FILE     check this configuration file (instead of SOCKSWITCH_CONF)\n"
		"  --routes RULES  check these rules (instead of SOCKSWITCH_ROUTES)\n"
		"  -h, --help      show this help\n"
		"\n"
		"exit status: 0 if the switch can work (warnings allowed), 1 if it cannot\n"
		"(any FAIL), 2 on a usage error.\n");
}

static int nfail, nwarn;

/* --json: the lines are kept and printed as one object at the end */
static bool json_mode;
static struct {
	int level;
	char text[512];
} lines[64];
static int nlines;

__attribute__((format(printf, 2, 3)))
static void report(int level, const char *fmt, ...)
{
	static const char *tag[] = { "ok  ", "warn", "FAIL", "    " };
	va_list ap;
	va_start(ap, fmt);
	if (json_mode) {
		if (nlines < (int)(sizeof lines / sizeof lines[0])) {
			lines[nlines].level = level;
			vsnprintf(lines[nlines++].text, sizeof lines[0].text, fmt, ap);
		}
	} else {
		printf("%s  ", tag[level]);
		vprintf(fmt, ap);
		printf("\n");
	}
	va_end(ap);
	if (level == 1)
		nwarn++;
	if (level == 2)
		nfail++;
}
enum { OK, WARN, FAIL, INFO };

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static void check_memfd(void)
{
	int fd = (int)memfd_create("sockswitch-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		report(FAIL, "memfd: memfd_create: %s: no shared-memory connections possible", strerror(errno));
		return;
	}
	size_t sz = 2u * RING_DEFAULT_KIB * 1024 + 4096;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)sz) == 0)
		p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	/* segments are sealed against resizing before they are shared, and a
	 * peer's unsealed one is refused */
	if (p != MAP_FAILED && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		report(FAIL, "memfd: cannot seal a segment against resizing: %s: no shared-memory connections possible",
		       strerror(errno));
		munmap(p, sz);
		close(fd);
		return;
	}
	if (p == MAP_FAILED)
		report(FAIL, "memfd: cannot size and map a %zu KiB segment: %s", sz >> 10, strerror(errno));
	else {
		memset(p, 1, sz); /* really backed by memory */
		munmap(p, sz);
		report(OK, "memfd: shared segments can be created, sealed and mapped (%zu KiB per connection by default)", sz >> 10);
	}
	close(fd);
}

static void check_eventfd(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd < 0) {
		report(FAIL, "eventfd: %s: sleeping sides could not be woken", strerror(errno));
		return;
	}
	uint64_t v = 1;
	bool ok = write(fd, &v, sizeof v) == sizeof v && read(fd, &v, sizeof v) == sizeof v;
	close(fd);
	report(ok ? OK : FAIL, "eventfd: %s", ok ? "wake-ups work" : "cannot signal an eventfd");
}

/* The wait policy's shared decision (common/waitshare.c): whether this
 * user's switched processes can agree on when to stop yielding. */
static void check_wait_share(void)
{
	struct ssw_wait_share *w = ssw_wait_share_attach();
	if (!w) {
		report(WARN, "wait policy: the page this user's switched processes share (System V, `ipcs -m`) cannot "
			     "be had (IPC refused, or another user's or another layout's segment under its key): each "
			     "process decides alone when to stop yielding beside CPU-bound programs (clients may be "
			     "served less evenly under load)");
		return;
	}
	uint64_t now = ssw_now_ns(), until = ssw_wait_share_until(w, now);
	if (until > now)
		report(OK, "wait policy: shared by this user's switched processes; yields are off for %llu ms more "
			   "(CPU-bound programs seen beside them)", (unsigned long long)((until - now) / 1000000));
	else
		report(OK, "wait policy: shared by this user's switched processes; yields are on (no CPU-bound "
			   "program seen beside them lately)");
	shmdt(w);
}

static void check_rendezvous(void)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(FAIL, "rendezvous: Unix sockets: %s", strerror(errno));
		return;
	}
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "sockswitch-doctor-%d", (int)getpid());
	int rc = bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n));
	if (rc == 0)
		rc = listen(fd, 1);
	if (rc < 0)
		report(FAIL, "rendezvous: cannot listen on an abstract Unix socket: %s", strerror(errno));
	else
		report(OK, "rendezvous: abstract Unix sockets work in this network namespace");
	close(fd);
}

/* A child reads its parent's memory: with Yama ptrace_scope 1 that is what
 * two unrelated peers may not do either. */
static void check_cma(void)
{
	bool off = ssw_param_choice(SSW_P_CMA) == 0;
	long yama = read_long("/proc/sys/kernel/yama/ptrace_scope");
	static volatile char secret[64] = "sockswitch-doctor-cma";
	int pfd[2];
	if (pipe(pfd) < 0) {
		report(WARN, "CMA: cannot test (pipe: %s)", strerror(errno));
		return;
	}
	pid_t parent = getpid();
	pid_t c = fork();
	if (c == 0) {
		close(pfd[0]);
		char buf[64] = "";
		struct iovec l = { buf, sizeof buf }, r = { (void *)secret, sizeof secret };
		ssize_t n = process_vm_readv(parent, &l, 1, &r, 1, 0);
		int res = n == (ssize_t)sizeof buf && !strcmp(buf, "sockswitch-doctor-cma") ? 0 : (n < 0 ? errno : EIO);
		(void)!write(pfd[1], &res, sizeof res);
		_exit(0);
	}
	close(pfd[1]);
	int res = -1;
	if (c < 0 || read(pfd[0], &res, sizeof res) != sizeof res)
		res = -1;
	close(pfd[0]);
	if (c > 0)
		waitpid(c, NULL, 0);
	char ys[48] = "";
	if (yama >= 0)
		snprintf(ys, sizeof ys, " (Yama ptrace_scope %ld)", yama);
	if (res == 0)
		report(OK, "CMA: process_vm_readv between processes of this user works%s: the rendezvous can be used "
			   "(SOCKSWITCH_RDMA=read|write; off by default on shm, where the ring is faster)", ys);
	else if (res > 0)
		report(WARN, "CMA: process_vm_readv refused: %s%s: a requested rendezvous falls back to the ring (still switched)",
		       strerror(res), ys);
	else
		report(WARN, "CMA: cannot test (fork failed)");
	if (off)
		report(WARN, "CMA: SOCKSWITCH_CMA=0 is set: programs started here will not use it");
}

static void check_limits(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		unsigned long long soft = rl.rlim_cur == RLIM_INFINITY ? 1ull << 20 : (unsigned long long)rl.rlim_cur;
		unsigned long long conns = soft / FDS_PER_CONN;
		report(conns >= 64 ? OK : WARN, "limits: RLIMIT_NOFILE %llu: about %llu switched connections per process "
		       "(%d descriptors each)", soft, conns, FDS_PER_CONN);
	}
	long maps = read_long("/proc/sys/vm/max_map_count");
	if (maps > 0)
		report(OK, "limits: vm.max_map_count %ld: about %ld connections per process by memory maps", maps,
		       maps / (MAPS_PER_CONN + 1));
	long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0) {
		unsigned long long mib = (unsigned long long)pages * (unsigned long long)psz >> 20;
		report(mib >= 64 ? OK : WARN, "memory: %llu MiB free: about %llu connections at %d KiB of ring each way", mib,
		       mib * 1024 / (2 * RING_DEFAULT_KIB), RING_DEFAULT_KIB);
	}
}

/* The build facts of the library file (providers.c puts them there), into
 * out: 0, or -1 when it has none (not a sockswitch library, or one built
 * before it said them). */
static int lib_facts(const char *lib, char *out, size_t len)
{
	int fd = open(lib, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	size_t sz = (size_t)st.st_size;
	const char *m = mmap(NULL, sz, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	static const char tag[] = SSW_BUILD_FACTS_TAG;
	const char *at = memmem(m, sz, tag, sizeof tag - 1);
	int rc = -1;
	if (at) {
		at += sizeof tag - 1;
		size_t n = strnlen(at, sz - (size_t)(at - m));
		if (at + n < m + sz && n < len) {
			memcpy(out, at, n);
			out[n] = '\0';
			rc = 0;
		}
	}
	munmap((void *)m, sz);
	return rc;
}

/* Which providers this sockswitch has (it answers for routes and the
 * summary), and whether the library it preloads has the same: they
 * differ when SOCKSWITCH_LIB names another build's. */
static void check_providers(const char *lib)
{
	report(OK, "%s", SSW_BUILD_FACTS);
	char facts[256];
	if (!lib)
		return;
	if (lib_facts(lib, facts, sizeof facts) < 0)
		report(WARN, "library: %s does not say which providers it has (another build of sockswitch?): "
			     "the answers here are this sockswitch's", lib);
	else if (strcmp(facts, SSW_BUILD_FACTS))
		report(WARN, "library: %s is another build: %s; the answers here are this sockswitch's", lib, facts);
}

static void check_libfabric(void)
{
#ifdef SSW_WITH_FABRIC
	char line[512];
	int level = ssw_fabric_probe(line, sizeof line);
	report(level < 0 ? INFO : level ? WARN : OK, "%s", line);
	/* Which libfabric providers exist here (verbs needs RDMA hardware). */
	bool rdma = false;
	DIR *d = opendir("/sys/class/infiniband");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			rdma = rdma || e->d_name[0] != '.';
		closedir(d);
	}
	report(INFO, "RDMA devices: %s", rdma ? "present (/sys/class/infiniband)" : "none (libfabric would use its tcp provider)");
#else
	report(INFO, "libfabric: not looked for: this build has no fabric provider (" SSW_FABRIC_LEFT_OUT
		     "): `route ... fabric` rules use kernel TCP");
#endif
}

static void check_netns(void)
{
	char self[64] = "", init[64] = "";
	ssize_t n = readlink("/proc/self/ns/net", self, sizeof self - 1);
	if (n > 0)
		self[n] = '\0';
	n = readlink("/proc/1/ns/net", init, sizeof init - 1);
	if (n > 0)
		init[n] = '\0';
	if (!self[0]) {
		report(WARN, "namespace: cannot read /proc/self/ns/net");
		return;
	}
	const char *where = !init[0] ? "" : strcmp(self, init) ? ", not the host's (pid 1's)" : ", the host's";
	report(OK, "namespace: network namespace %s%s: programs switch with peers in this namespace only", self, where);
}

static void check_registry(void)
{
	char dir[PATH_MAX - 32];
	if (ssw_statreg_dir(dir, sizeof dir) < 0) {
		report(WARN, "stat registry: cannot name this namespace's directory: `sockswitch stat` will show nothing");
		return;
	}
	const char *base = ssw_statreg_base();
	if (ssw_param_choice(SSW_P_STAT) == 0) {
		report(WARN, "stat registry: SOCKSWITCH_STAT=0: programs started here are not listed by `sockswitch stat`");
		return;
	}
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", base);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	if (access(dir, W_OK) == 0 || (access(dir, F_OK) < 0 && (access(base, W_OK) == 0 ||
								   (access(base, F_OK) < 0 && access(parent, W_OK) == 0))))
		report(OK, "stat registry: %s (programs publish their sockets there)", dir);
	else
		report(WARN, "stat registry: %s is not writable: programs of this user will not be listed by `sockswitch stat`", dir);
}

/* Every rejected SOCKSWITCH_* value, as the library will say it (the
 * table and its current values: `sockswitch params`). */
static void check_settings(void)
{
	int bad = 0;
	char line[512];
	ssw_params_load();
	for (int i = 0; i < SSW_P_COUNT; i++) {
		if (!ssw_param_error(i))
			continue;
		ssw_param_problem(i, line, sizeof line);
		report(ssw_params[i].bad == SSW_PB_OFF ? FAIL : WARN, "settings: %s", line);
		bad++;
	}
	if (!bad)
		report(OK, "settings: every SOCKSWITCH_* value set is valid (see `sockswitch params`)");
}

/* What a route target means for this build: "switched over fabric
 * (libfabric tcp)", "kernel TCP (provider fabric not built in)"... */
static void doctor_target_what(int t, char *buf, size_t len)
{
	if (t == SSW_TARGET_TCP || t < 0 || t >= ssw_registry_count) {
		snprintf(buf, len, "kernel TCP (not switched)");
		return;
	}
	const struct ssw_provider *p = ssw_registry[t].prov;
	struct ssw_provider_copy c;
	char why[256];
	if (!p)
		snprintf(buf, len, "kernel TCP (provider %s not built in)", ssw_registry[t].name);
	else if (ssw_provider_check(p, &c, why, sizeof why) < 0)
		snprintf(buf, len, "kernel TCP (provider %s refused: %s)", p->name, why);
	else
		snprintf(buf, len, "switched over %s", p->describe ? p->describe() : p->name);
}

static void summary(const struct ssw_routes *t)
{
	printf("\nwhat will be switched (both ends must run under the switch):\n");
	for (int i = 0; i < t->nrules; i++) {
		char txt[256];
		ssw_route_rule_format(&t->rules[i], txt, sizeof txt);
		char what[400];
		doctor_target_what(t->rules[i].target, what, sizeof what);
		printf("  %-40s %-48s %s\n", txt, what, t->rules[i].origin);
	}
	printf("  %-40s %-48s\n", "anything else", "kernel TCP (no rule)");
	int n = 0;
	for (int p = 1; p < 65536; p++)
		if (ssw_route_port_excluded(t, (uint16_t)p))
			printf("%s%d", n++ ? "," : "  never switched: ports ", p);
	if (n)
		printf("\n");
	/* A few concrete destinations, as `sockswitch routes` would answer. */
	const char *probes[] = { "127.0.0.1", "::1", NULL, "192.0.2.1" };
	char own[INET6_ADDRSTRLEN] = "";
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) == 0) {
		for (struct ifaddrs *i = ifa; i && !own[0]; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
			    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
				inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, own, sizeof own);
		freeifaddrs(ifa);
	}
	if (own[0])
		probes[2] = own;
	printf("examples:\n");
	for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
		if (!probes[k])
			continue;
		struct sockaddr_storage ss = { 0 };
		socklen_t len;
		if (strchr(probes[k], ':')) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			a->sin6_family = AF_INET6;
			inet_pton(AF_INET6, probes[k], &a->sin6_addr);
			len = sizeof *a;
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			a->sin_family = AF_INET;
			inet_pton(AF_INET, probes[k], &a->sin_addr);
			len = sizeof *a;
		}
		int tg;
		ssw_route_lookup(t, (struct sockaddr *)&ss, len, &tg);
		char what[400];
		doctor_target_what(tg, what, sizeof what);
		printf("  %-16s -> %s\n", probes[k], strncmp(what, "switched", 8) ? "kernel TCP" : ssw_target_name(tg));
	}
}

int doctor_main(int argc, char **argv)
{
	const char *conf = NULL, *rules = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], **dst;
		if (cli_is_help(a)) {
			doctor_usage(stdout);
			return CLI_EXIT_OK;
		}
		if (!strcmp(a, "--json")) {
			json_mode = true;
			continue;
		}
		if (!strcmp(a, "--conf"))
			dst = &conf;
		else if (!strcmp(a, "--routes"))
			dst = &rules;
		else if (!strncmp(a, "--conf=", 7)) {
			conf = a + 7;
			continue;
		} else if (!strncmp(a, "--routes=", 9)) {
			rules = a + 9;
			continue;
		} else {
			fprintf(stderr, "sockswitch doctor: unknown argument '%s'\n\n", a);
			doctor_usage(stderr);
			return CLI_EXIT_USAGE;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "sockswitch doctor: %s needs a value\n", a);
			return CLI_EXIT_USAGE;
		}
		*dst = argv[++i];
	}
	fflush(stdout);

	char lib[PATH_MAX], why[2048];
	bool have_lib = ssw_find_lib(lib, sizeof lib, why, sizeof why) == 0;
	if (!have_lib)
		report(FAIL, "library: %s", why);
	else
		report(OK, "library: %s", lib);
	check_providers(have_lib ? lib : NULL);

	static struct ssw_routes table;
	bool have_table = false;
	char err[512];
	if (cli_apply_config("doctor", conf, rules) < 0) {
		report(FAIL, "configuration: cannot be read: programs would run on kernel TCP only");
	} else if (cli_check_config(NULL, &table, err, sizeof err) < 0) {
		report(FAIL, "configuration: %s: programs would run on kernel TCP only", err);
	} else {
		const char *c = ssw_param_str(SSW_P_CONF), *r = ssw_param_str(SSW_P_ROUTES);
		report(OK, "configuration: valid (%d rules; %s%s%s%s)", table.nrules, c && *c ? "file " : "",
		       c && *c ? c : "", c && *c && r && *r ? ", " : "", r && *r ? "SOCKSWITCH_ROUTES" : (c && *c ? "" : "built-in default only"));
		have_table = true;
	}
	if (ssw_param_choice(SSW_P_DISABLE) == 1)
		report(FAIL, "SOCKSWITCH_DISABLE is set: programs started with it are never switched");
	check_settings();

	check_memfd();
	check_eventfd();
	check_wait_share();
	check_rendezvous();
	check_cma();
	check_limits();
	check_netns();
	check_registry();
	check_libfabric();

	if (json_mode) {
		static const char *lv[] = { "ok", "warn", "fail", "info" };
		printf("{\"can_work\": %s, \"failures\": %d, \"warnings\": %d, \"checks\": [",
		       nfail ? "false" : "true", nfail, nwarn);
		for (int i = 0; i < nlines; i++) {
			/* "name: message": the check's name is what precedes the first colon */
			char name[64];
			const char *colon = strchr(lines[i].text, ':');
			size_t k = colon && (size_t)(colon - lines[i].text) < sizeof name ? (size_t)(colon - lines[i].text) : 0;
			memcpy(name, lines[i].text, k);
			name[k] = '\0';
			printf("%s\n  {\"level\": \"%s\", \"check\": ", i ? "," : "", lv[lines[i].level]);
			cli_json_str(name);
			printf(", \"message\": ");
			cli_json_str(lines[i].text);
			printf("}");
		}
		printf("\n]}\n");
		return nfail ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	}
	if (have_table)
		summary(&table);
	printf("\n%s: %d failure(s), %d warning(s)\n",
	       nfail ? "the switch cannot work here" : "the switch can work here", nfail, nwarn);
	return nfail ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
