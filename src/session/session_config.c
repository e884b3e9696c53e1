/* session_config.c — the session tunables, taken from the settings table
 * (common/params.c), which names the variable when a value is invalid. */
#include "session/session.h"

#include "common/params.h"
#include "common/waitpol.h"

#include <stdio.h>

struct ssw_session_config ssw_session_cfg = {
	.rndv_threshold = SSW_RNDV_DEFAULT,
	.rndv_max = 0,
	.rdma_mode = SSW_RDMA_AUTO,
	.spin_max_ns = 50000,
};

static const enum ssw_param_id session_params[] = {
	SSW_P_RNDV_THRESHOLD, SSW_P_RNDV_MAX, SSW_P_SPIN_US, SSW_P_WAIT, SSW_P_RDMA, SSW_P_FAULT,
};

void ssw_session_config_apply(void)
{
	struct ssw_session_config c = ssw_session_cfg;
	/* modes in the order of the table's choices: auto, read, write, none */
	static const int rdma[] = { SSW_RDMA_AUTO, SSW_RDMA_READ_ONLY, SSW_RDMA_WRITE_ONLY, SSW_RDMA_NONE };
	c.rndv_threshold = (uint32_t)ssw_param_num(SSW_P_RNDV_THRESHOLD);
	c.rndv_max = (uint32_t)ssw_param_num(SSW_P_RNDV_MAX);
	c.spin_max_ns = (uint32_t)ssw_param_num(SSW_P_SPIN_US) * 1000;
	c.rdma_mode = rdma[ssw_param_choice(SSW_P_RDMA)];
	c.fault_regfail = ssw_param_choice(SSW_P_FAULT) == 0;
	c.fault_nomem = ssw_param_choice(SSW_P_FAULT) == 1;
	/* swap-suspend, swap-resume, swap-suspended: choices 5, 6, 7 */
	c.fault_swap = ssw_param_choice(SSW_P_FAULT) >= 5 ? ssw_param_choice(SSW_P_FAULT) - 4 : 0;
	/* an explicit spin budget is a request for the fixed busy-poll of old,
	 * whatever the load, unless SOCKSWITCH_WAIT says otherwise */
	int wmode = ssw_param(SSW_P_SPIN_US)->set ? SSW_WAITMODE_SPIN : SSW_WAITMODE_AUTO;
	if (ssw_param(SSW_P_WAIT)->set)
		wmode = ssw_param_choice(SSW_P_WAIT);
	/* Rendezvous from 4 MiB on, on both providers (README, "Large sends:
	 * the rendezvous and the registration cache"; scripts/rndv_figures.sh):
	 * there it moved 1.2-1.6x the bytes of the messages' path with 10-25%
	 * less CPU per MB, on shm (one copy by Cross Memory Attach against the
	 * ring's two) and over fabric (one fi_read against 64 KiB messages);
	 * at 1 MiB they tie (shm's ring ahead), at 2 MiB it varies.  Asking for
	 * a mode (read/write) without a threshold gets 64 KiB and up, as
	 * before. */
	if (!ssw_param(SSW_P_RNDV_THRESHOLD)->set &&
	    (c.rdma_mode == SSW_RDMA_READ_ONLY || c.rdma_mode == SSW_RDMA_WRITE_ONLY))
		c.rndv_threshold = 64u << 10;
	ssw_session_cfg = c;
	ssw_wait_set_mode(wmode);
	ssw_wait_share_on();
	ssw_wait_set_spin_max(c.spin_max_ns);
}

bool ssw_session_rndv_configured(void)
{
	return ssw_param_choice(SSW_P_RDMA) != 3; /* none */
}

int ssw_session_config_load(char *err, size_t errlen)
{
	ssw_params_load();
	for (size_t i = 0; i < sizeof session_params / sizeof session_params[0]; i++) {
		const char *e = ssw_param_error(session_params[i]);
		if (e) {
			snprintf(err, errlen, "%s", e);
			return -1;
		}
	}
	ssw_session_config_apply();
	return 0;
}
