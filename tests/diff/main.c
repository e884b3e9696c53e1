/* main.c — ssw_diff, the differential tester: random programs for two
 * connected TCP endpoints, run on kernel TCP and under the switch, their
 * transcripts compared (README, "Tests").
 *
 *   ssw_diff check --preload LIB [--profile shm|fabric] [--from N --count M | --seed N [--steps LIST] | --seeds LIST]
 *                  [--netns NS_A,NS_B --addr A_ADDR] [--slow K] [--replay CMD] [--show] [--verbose]
 *   ssw_diff check --twice ...      both runs on kernel TCP (the tester's own determinism)
 *   ssw_diff check --print --seed N [--steps LIST]    the program, not run
 *   ssw_diff __ep A|B ...           an endpoint process (the driver starts them)
 *
 * tests/diff/diff.sh sets up the network namespaces and the preload and is
 * what CTest, the soak (tests/diff/soak.sh) and every printed replay run. */
#include "diff.h"

#include <stdio.h>
#include <string.h>

int diff_check_main(int argc, char **argv);

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "__ep") == 0)
		return diff_endpoint_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "check") == 0)
		return diff_check_main(argc, argv);
	fprintf(stderr, "usage: ssw_diff check --preload LIB [--profile shm|fabric] [--from N --count M | --seed N "
			"[--steps LIST]] [--show]\n");
	return 2;
}
