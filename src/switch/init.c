/* init.c — one-time start of the switch in a process: logging, tunables,
 * routes, providers, fork handling.  Any failure leaves the switch off and
 * the application on kernel TCP, with one message. */
#include "switch/switch.h"

#include "switch/setup/setup.h"
#include "switch/share/handover.h"

#include "common/log.h"
#include "common/memhook.h"
#include "common/params.h"
#include "regcache/regcache.h"
#include "session/session.h"
#include "switch/route/providers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ssw_routes ssw_routes_table;

/* The registry's providers as this process uses them: checked and started
 * once, at start-up, and only those a route names. */
static struct ssw_provider_copy usable[SSW_REGISTRY_MAX];
static bool usable_ok[SSW_REGISTRY_MAX];

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool active;
static int hook_error; /* ssw_mem_monitor_start: why the memory hooks are not there */

/* One line per provider that routes name and that cannot serve: those
 * routes then use kernel TCP. */
static void start_provider(int i, const struct ssw_route_rule *rule)
{
	char why[256];
	const struct ssw_registered *r = &ssw_registry[i];
	if (!r->prov) {
		SSW_WARN("route %s: provider %s is not built into this library: its connections use kernel TCP",
			 rule->origin, r->name);
		return;
	}
	if (ssw_provider_check(r->prov, &usable[i], why, sizeof why) < 0 ||
	    (strcmp(r->prov->name, r->name) && snprintf(why, sizeof why, "it calls itself %s", r->prov->name))) {
		SSW_WARN("provider %s refused (%s): its connections use kernel TCP", r->name, why);
		return;
	}
	int rc = usable[i].p.init();
	if (rc < 0) {
		SSW_WARN("provider %s cannot start (%s): its connections use kernel TCP", r->name, strerror(-rc));
		return;
	}
	/* SOCKSWITCH_SHARED_CONTEXT=0: every provider is taken as one that
	 * cannot share a connection between processes (session_swap.c), so
	 * that shm walks fabric's road on one host */
	if (ssw_param_choice(SSW_P_SHARED_CONTEXT) == 0)
		usable[i].p.caps &= ~(uint32_t)SSW_CAP_SHARED_CONTEXT;
	usable_ok[i] = true;
	ssw_exit_close_private(); /* exit closes connections as the kernel would (exit.c) */
}

/* One line per rejected setting; true when one of them turns the switch off. */
static bool report_settings(void)
{
	char line[512];
	for (int i = 0; i < SSW_P_COUNT; i++)
		if (ssw_param_error(i) && !ssw_params[i].cli) {
			ssw_param_problem(i, line, sizeof line);
			SSW_WARN("%s", line);
		}
	return ssw_params_first_refusal() >= 0;
}

static void init_once(void)
{
	char err[512];
	ssw_params_load();
	if (ssw_log_init(err, sizeof err) < 0)
		SSW_WARN("%s", err);
	bool refused = report_settings();
	/* the summary is written even when the switch stays off: it then says so
	 * (switched=0), which is what an operator checking a run wants to see */
	ssw_stats_check_file();
	atexit(ssw_stats_dump_at_exit);
	if (ssw_param_choice(SSW_P_DISABLE) == 1) {
		SSW_INFO("disabled by SOCKSWITCH_DISABLE");
		return;
	}
	if (refused)
		return;
	ssw_session_config_apply();
	ssw_trim_init();
	ssw_swap_helper_init();
	ssw_setup_move_init();
	if (hook_error)
		SSW_INFO("no memory hooks (%s): the registration cache is off", strerror(-hook_error));
	if (ssw_routes_load(&ssw_routes_table, err, sizeof err) < 0) {
		SSW_WARN("%s; switch off, using kernel TCP", err);
		return;
	}
	if (ssw_fdtab_init() < 0) {
		SSW_WARN("cannot allocate the fd table; switch off");
		return;
	}
	bool seen[SSW_REGISTRY_MAX] = { false };
	for (int i = 0; i < ssw_routes_table.nrules; i++) {
		const struct ssw_route_rule *r = &ssw_routes_table.rules[i];
		if (r->target >= 0 && r->target < ssw_registry_count && !seen[r->target]) {
			seen[r->target] = true;
			start_provider(r->target, r);
		}
	}
	active = true;
	SSW_DEBUG("switch active (%d routes)", ssw_routes_table.nrules);
}

/* The registration caches learn of a range before its mapping changes. */
static void mem_changing(void *addr, size_t len)
{
	ssw_regcache_invalidate_all(addr, len);
}

void ssw_mem_monitor_start(void)
{
	/* only where a cache may be used: the rendezvous is on, the cache too,
	 * the settings leave the switch on, and a provider that registers
	 * memory may carry connections (shm registers none: Cross Memory
	 * Attach finds the pages at each copy; tests make it pin) */
	if (ssw_param_choice(SSW_P_REGCACHE) == 0 || !ssw_session_rndv_configured() ||
	    ssw_param_choice(SSW_P_DISABLE) == 1 || ssw_params_first_refusal() >= 0)
		return;
	if (ssw_param_choice(SSW_P_FAULT) != 3 && !ssw_routes_name_other_than("shm"))
		return;
	int rc = ssw_memhook_install(mem_changing);
	ssw_regcache_set_monitored(rc == 0);
	/* said once ssw_init has set up the log */
	hook_error = rc;
}

bool ssw_init(void)
{
	pthread_once(&once, init_once);
	return active;
}

void ssw_exec_inherited(const char *spec)
{
	if (ssw_init()) {
		ssw_setup_exec_import(spec);
		ssw_handover_import(spec);
	}
}

void ssw_providers_quiesce(void)
{
	for (int t = 0; t < ssw_registry_count; t++)
		if (usable_ok[t] && usable[t].p.quiesce)
			usable[t].p.quiesce();
}

void ssw_provider_own_epoll_ctl(int epfd, int op, int fd, const struct epoll_event *ev)
{
	for (int t = 0; t < ssw_registry_count; t++)
		if (usable_ok[t] && usable[t].p.own_epoll_ctl)
			usable[t].p.own_epoll_ctl(epfd, op, fd, ev);
}

const struct ssw_provider *ssw_provider_for(int t)
{
	if (t < 0 || t >= ssw_registry_count || !usable_ok[t])
		return NULL;
	return &usable[t].p;
}
