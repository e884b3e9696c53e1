/* init.c — one-time start of the switch in a process: logging, tunables,
 * routes, providers, fork handling.  Any failure leaves the switch off and
 * the application on kernel TCP, with one message. */
#include "switch/switch.h"

#include "common/log.h"
#include "common/params.h"
#include "session/session.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct ssw_routes ssw_routes_table;
extern const struct ssw_provider ssw_provider_shm;
extern const struct ssw_provider ssw_provider_fabric;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool active;
static bool shm_ok;
static bool fabric_ok;

/* Route options of fabric rules go to the provider before its init (a
 * stand-in until the provider registry passes each rule's options). */
static bool configure_fabric(char *err, size_t len, bool *used)
{
	for (int i = 0; i < ssw_routes_table.nrules; i++) {
		const struct ssw_route_rule *r = &ssw_routes_table.rules[i];
		*used |= r->target == SSW_TARGET_FABRIC;
		for (int k = 0; r->target == SSW_TARGET_FABRIC && k < r->nopts; k++) {
			char e[256];
			if (ssw_provider_fabric.configure(r->opt_key[k], r->opt_val[k], e, sizeof e) < 0) {
				snprintf(err, len, "%s: %s", r->origin, e);
				return false;
			}
		}
	}
	return true;
}

static void check_provider(const struct ssw_provider *p, bool *ok)
{
	const struct ssw_conn_ops *c = p->conn;
	/* Required ops: a provider missing one is not used at all. */
	*ok = p->spi_version == SSW_SPI_VERSION && c && p->msg && p->rdma && p->progress && c->listen &&
	      c->accept && c->connect && c->connect_complete && c->close && p->msg->send && p->msg->recv_peek &&
	      p->msg->recv_done && p->progress->arm && p->progress->wait_fds && p->progress->rx_ready &&
	      p->init() == 0;
	if (!*ok)
		SSW_WARN("provider %s unusable: connections it would serve use kernel TCP", p->name);
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
	if (ssw_routes_load(&ssw_routes_table, err, sizeof err) < 0) {
		SSW_WARN("%s; switch off, using kernel TCP", err);
		return;
	}
	if (ssw_fdtab_init() < 0) {
		SSW_WARN("cannot allocate the fd table; switch off");
		return;
	}
	check_provider(&ssw_provider_shm, &shm_ok);
	bool fabric_used = false;
	if (!configure_fabric(err, sizeof err, &fabric_used))
		SSW_WARN("%s; fabric routes use kernel TCP", err);
	else if (fabric_used)
		check_provider(&ssw_provider_fabric, &fabric_ok);
	active = true;
	SSW_DEBUG("switch active (%d routes)", ssw_routes_table.nrules);
}

bool ssw_init(void)
{
	pthread_once(&once, init_once);
	return active;
}

const struct ssw_provider *ssw_provider_for(enum ssw_target t)
{
	if (t == SSW_TARGET_SHM && shm_ok)
		return &ssw_provider_shm;
	if (t == SSW_TARGET_FABRIC && fabric_ok)
		return &ssw_provider_fabric;
	return NULL;
}
