/* Datasheet peaks of known GPUs (nb_device_datasheet_peak, include/nabla/device.h): NVIDIA's
 * published dense throughput, not measurements; `nabla unet bench` prints its compute floor from
 * them. The device name tells the GPU and its form factor (PCIe parts clock lower). */
#include <string.h>

#include "core/util.h"
#include "nabla/device.h"
#include "nabla/status.h"

typedef struct peak_row {
    const char *precision;
    double sxm, pcie;                      /* FLOP/s: H100 / H200 SXM, H100 PCIe */
    const char *sxm_source, *pcie_source;
} peak_row;

static const peak_row rows[] = {
    {"bf16", 989.4e12, 756e12, "H100/H200 SXM BF16 dense tensor-core datasheet",
     "H100 PCIe BF16 dense tensor-core datasheet"},
    {"tf32", 494.7e12, 378e12, "H100/H200 SXM TF32 dense tensor-core datasheet",
     "H100 PCIe TF32 dense tensor-core datasheet"},
    {"fp32", 66.9e12, 51.2e12, "H100/H200 SXM FP32 (non-tensor) datasheet", "H100 PCIe FP32 (non-tensor) datasheet"},
};

nb_status nb_device_datasheet_peak(const nb_device *dev, const char *precision, double *flops,
                                   const char **source) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(precision);
    NB_CHECK_ARG(flops);
    NB_CHECK_ARG(source);
    const peak_row *r = NULL;
    for (size_t i = 0; i < NB_ARRAY_LEN(rows); i++)
        if (!strcmp(precision, rows[i].precision)) r = &rows[i];
    if (!r) return nb_error(NB_ERR_INVALID_ARG, "unknown precision '%s' (fp32, tf32 or bf16)", precision);
    *flops = 0;
    if (nb_device_get_kind(dev) != NB_DEVICE_CUDA) {
        *source = "the CPU: no datasheet peak";
        return NB_OK;
    }
    const char *name = nb_device_get_info(dev)->name;
    if (!strstr(name, "H100") && !strstr(name, "H200")) {
        *source = "unknown GPU: no assumed peak";
        return NB_OK;
    }
    int pcie = strstr(name, "PCIe") != NULL;
    *flops = pcie ? r->pcie : r->sxm;
    *source = pcie ? r->pcie_source : r->sxm_source;
    return NB_OK;
}
