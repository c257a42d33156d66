/* Checks run at the points where nabla waits for a device on the user's behalf (sync_check.c):
 * nb_device_synchronize, nb_tensor_to_host, and copies into host (CPU) memory (nb_tensor_copy,
 * nb_tensor_to). The call layer registers one per module whose launches defer their bounds checks
 * (call/defer.c), so that an out-of-bounds record left by a deferred launch is reported there,
 * not only at the module's own next launch or nb_module_check.
 *
 * Lock order: a device's check list lock is taken before any module's lock (a check takes its
 * module's lock), so nothing may add or remove a check while holding a module lock. */
#ifndef NB_DEVICE_SYNC_CHECK_H
#define NB_DEVICE_SYNC_CHECK_H

#include "nabla/device.h"
#include "nabla/status.h"

/* Returns NB_OK, or an error (message set) to report from the sync point. Must not call
 * nb_device_synchronize (use nb_device_wait). */
typedef nb_status (*nb_sync_check_fn)(void *ctx);

nb_status nb_device_add_sync_check(nb_device *dev, nb_sync_check_fn fn, void *ctx);
void nb_device_remove_sync_check(nb_device *dev, nb_sync_check_fn fn, void *ctx);

/* Hands dev an error that has no caller left to return it (a module freed with a deferred error
 * pending): the device's next sync point returns it; the first one is kept. */
void nb_device_post_error(nb_device *dev, nb_status code, const char *msg);

/* Runs dev's checks (after the caller has waited): the first error, else a posted one, else NB_OK.
 * Cheap when nothing is registered or posted (two atomic loads). */
nb_status nb_device_run_sync_checks(nb_device *dev);

/* Waits for dev's queued work without running its checks (for the checks themselves). */
nb_status nb_device_wait(nb_device *dev);

/* Device teardown: an error still posted is printed (nothing is left to return it from). */
void nb_device_sync_checks_close(nb_device *dev);

#endif
