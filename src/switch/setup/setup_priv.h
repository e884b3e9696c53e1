/* setup_priv.h — what the set-up files share among themselves (setup.h is
 * what the rest of the switch sees). */
#ifndef SSW_SETUP_PRIV_H
#define SSW_SETUP_PRIV_H

#include "switch/setup/setup.h"

/* What a connector tells the listener (priv.c): the protocol versions it
 * speaks, its own address (the accepted socket's peer), the address it
 * dialed (the accepted socket's name), its session INIT, and the number of
 * its kernel socket (cfd) in its process: where the listener can see that
 * address held (claim.c).  The listener's reply is its INIT alone. */
struct ssw_conn_priv {
	uint32_t magic;
	uint16_t vmin, vmax;   /* SSW_PROTO_MIN, SSW_PROTO_MAX of the connector */
	uint16_t cfam, cport, sfam, sport;
	uint8_t caddr[16], saddr[16];
	uint8_t init[SSW_SESSION_INIT_BYTES]; /* the session's, opaque here */
	int32_t cfd;
	uint16_t cdomain; /* that socket's family (AF_INET6 may hold IPv4) */
	uint16_t pad;
};
_Static_assert(sizeof(struct ssw_conn_priv) <= SSW_CONNECT_PRIV_MAX, "a connect request's private data");
void ssw_conn_priv_make(struct ssw_conn_priv *p, const struct sockaddr_storage *client,
			const struct sockaddr_storage *server, const void *init);
/* Validate and decode a request that came under protocol version proto;
 * -1 if malformed or of versions that do not include proto. */
int ssw_conn_priv_parse(const void *buf, size_t len, uint32_t proto, struct sockaddr_storage *client,
			struct sockaddr_storage *server, void *init, int *cfd, int *cdomain);

/* move.c: a transport moving with control (session/session_move.c)
 * connects under this protocol number, which no ordinary connect (keyed
 * by the protocol version) uses, with this private data: the token the
 * suspended side chose and sent over the old transport only
 * (tests/progs/move_spoof.c forges it). */
#define SSW_MOVE_PROTO 0x100u
#define SSW_MOVE_MAGIC 0x4d575353u /* "SSWM" */
struct ssw_move_priv {
	uint32_t magic;
	uint8_t token[SSW_SESSION_MOVE_TOKEN];
};

/* claim.c: is the connector of the request on ep who it says it is, and
 * did it dial an address this listener serves?  On true *client is the
 * peer address to report; *ask_proof: our INIT asks for listening proofs. */
bool ssw_claim_ok(struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep,
		  struct sockaddr_storage *client, const struct sockaddr_storage *server, int cfd, int cdomain,
		  bool *ask_proof);

/* proof.c: a hidden duplicate of a connecting socket (-1 if none), and its
 * end with the socket object (kept a while if the acceptor may not have
 * checked the address yet). */
int ssw_proof_make(int fd);
/* A proof the acceptor checks in O(1): a socket of ours listening on the
 * connecting socket's address, or -1. */
int ssw_proof_make_listening(struct ssw_sock *s, int fd);
/* The listening proof was not needed after all (or the connection goes to
 * kernel TCP): the kernel socket's SO_REUSEPORT back as the application left it. */
void ssw_proof_undo(struct ssw_sock *s, int fd);
void ssw_proof_release(struct ssw_sock *s);
/* Was dst's listener another user's at the last connect there (make the
 * listening proof)?  And what this connect found. */
bool ssw_proof_hint(const struct sockaddr_storage *dst);
void ssw_proof_learn(const struct sockaddr_storage *dst, bool other);

#endif
