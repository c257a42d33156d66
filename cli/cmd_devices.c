/* `nabla devices`: one line per device with its properties. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void print_device(nb_device *dev) {
    const nb_device_info *in = nb_device_get_info(dev);
    if (nb_device_get_kind(dev) == NB_DEVICE_CPU) {
        printf("%-8s %s | %d threads | %.1f GiB\n", nb_device_name(dev), in->name,
               in->multiprocessors, gib(in->total_memory));
        return;
    }
    printf("%-8s %s | sm_%d%d | %d SMs | %.1f GiB | smem %zu KiB/block (%zu opt-in), %zu KiB/SM"
           " | L2 %.0f MiB | %d MHz | driver %d.%d\n",
           nb_device_name(dev), in->name, in->cc_major, in->cc_minor, in->multiprocessors,
           gib(in->total_memory), in->shared_mem_per_block >> 10,
           in->shared_mem_per_block_optin >> 10, in->shared_mem_per_sm >> 10,
           (double)in->l2_cache / (1024.0 * 1024.0), in->clock_khz / 1000,
           in->driver_version / 1000, (in->driver_version % 1000) / 10);
}

int nb_cmd_devices(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: nabla devices\n\nLists the CPU and every CUDA device, one line each.\n"
                   "Prints why CUDA is unavailable when it is.\n");
            return 0;
        }
        return nb_cli_bad_usage("devices: unknown argument '%s'", argv[i]);
    }
    int rc = 0;
    nb_device *cpu = NULL;
    if (nb_device_open("cpu", &cpu) == NB_OK) {
        print_device(cpu);
        nb_device_close(cpu);
    } else {
        fprintf(stderr, "nabla: cpu: %s\n", nb_last_error());
        rc = 1;
    }
    int n = nb_cuda_device_count();
    if (n == 0) {
        const char *why = nb_cuda_unavailable_reason();
        printf("%-8s unavailable: %s\n", "cuda", why ? why : "no CUDA device");
    }
    for (int i = 0; i < n; i++) {
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%d", i);
        nb_device *dev = NULL;
        if (nb_device_open(spec, &dev) != NB_OK) {
            fprintf(stderr, "nabla: %s: %s\n", spec, nb_last_error());
            rc = 1;
            continue;
        }
        print_device(dev);
        nb_device_close(dev);
    }
    int v = nb_nvrtc_version();
    if (v)
        printf("%-8s NVRTC %d.%d (run-time CUDA compiler)\n", "nvrtc", v / 1000, (v % 1000) / 10);
    else
        printf("%-8s unavailable (libnvrtc not found; GPU kernels cannot be compiled)\n", "nvrtc");
    return rc;
}
