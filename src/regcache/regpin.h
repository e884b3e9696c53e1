/* regpin.h — pinned pages as an RDMA device holds them, for tests
 * (SOCKSWITCH_FAULT=pin) on machines without one.
 *
 * Registering memory with an RDMA device pins the physical pages mapped at
 * that moment: the device reads and writes those pages, whatever the
 * process maps at those addresses later.  That is what makes a stale cached
 * registration send wrong bytes, and what neither provider here shows by
 * itself (Cross Memory Attach and libfabric's tcp provider translate
 * addresses at each transfer).  A pin holds references to the pages the
 * way the kernel's pin does, by vmsplice(2) into pipes (without
 * SPLICE_F_GIFT the pipe refers to the process's pages, it copies nothing),
 * and reads them back with tee(2): what a device would move.  After an
 * munmap and a new mapping at the same addresses a pin still reads the old
 * pages; while the mapping stays it reads what the process wrote there. */
#ifndef SSW_REGPIN_H
#define SSW_REGPIN_H

#include <stddef.h>
#include <stdint.h>

struct ssw_pin;

/* Pin the pages mapped at [addr, addr+len) (page-aligned).  0 or -errno. */
int ssw_pin_new(void *addr, size_t len, struct ssw_pin **out);
/* Copy len bytes at offset off of the pinned pages into dst.  0 or -errno. */
int ssw_pin_read(struct ssw_pin *p, size_t off, void *dst, size_t len);
void ssw_pin_free(struct ssw_pin *p);

/* Registration-cache ops whose registrations are pins (the handle holds
 * the struct ssw_pin *): a cache that pins as an RDMA device would. */
struct ssw_reg;
int ssw_pin_cache_reg(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg);
void ssw_pin_cache_dereg(void *ctx, struct ssw_reg *reg);

#endif
