/**
 * The host's figures that go with a boot or a pre-warm: the cache filesystem's size and fill, the
 * block device behind it, memory and CPU for context (src/host/facts.ts reads them).
 */
import type { CacheFilesystem, HostContext, FillFigures } from "../host/facts.ts";
import { family, gauge, type MetricFamily } from "./family.ts";

/**
 * The cache filesystem's fill (labels: mount point and device), `ebs_cache_agent_fill.prom`:
 * written after a boot that came up and by each prune, so it is one file two use cases replace.
 */
export function cacheFilesystemMetrics(fs: FillFigures | CacheFilesystem): MetricFamily[] {
  const labels = { mountpoint: fs.mountPoint, device: fs.device };
  const inodes =
    fs.inodes === undefined || fs.freeInodes === undefined
      ? []
      : [
          gauge(
            "cache_filesystem_inodes",
            "inodes",
            "Inodes of the cache volume's filesystem (XFS allocates them as it goes: this grows).",
            fs.inodes,
            labels,
          ),
          gauge(
            "cache_filesystem_free_inodes",
            "inodes",
            "Inodes still free on the cache volume's filesystem.",
            fs.freeInodes,
            labels,
          ),
        ];
  return [
    gauge("cache_filesystem_size_bytes", "bytes", "Size of the cache volume's filesystem.", fs.sizeBytes, labels),
    gauge("cache_filesystem_used_bytes", "bytes", "Bytes used on the cache volume's filesystem.", fs.usedBytes, labels),
    gauge(
      "cache_filesystem_available_bytes",
      "bytes",
      "Bytes still available on the cache volume's filesystem.",
      fs.availableBytes,
      labels,
    ),
    gauge(
      "cache_filesystem_used_ratio",
      "ratio",
      "How full the cache volume's filesystem is (used / (used + available), as df counts it).",
      fs.usedRatio,
      labels,
    ),
    ...inodes,
  ];
}

/** The block device under the cache filesystem (in the boot's file). */
export function cacheDeviceMetrics(fs: CacheFilesystem): MetricFamily[] {
  return [
    gauge(
      "cache_device_info",
      "info",
      "The block device under the cache filesystem, with the model and serial it reports (an EBS volume's serial " +
        "is its id).",
      1,
      {
        device: fs.device,
        model: fs.model ?? "",
        serial: fs.serial ?? "",
      },
    ),
  ];
}

/** The host's families: memory and CPU, so a slow boot can be told from a small machine. */
export function hostMetrics(host: HostContext): MetricFamily[] {
  return [
    gauge("host_memory_bytes", "bytes", "The host's memory.", host.memoryBytes),
    gauge("host_cpu_cores", "cores", "The host's logical CPUs.", host.cpuCores),
    gauge("host_info", "info", "The host's CPU model.", 1, { cpu_model: host.cpuModel }),
    ...(host.instanceStore === undefined
      ? []
      : [
          family(
            "host_instance_store_disks",
            "gauge",
            "disks",
            "The instance's NVMe instance-store disks (never written by the agent; an AMI may run docker on one).",
            [{ labels: {}, value: host.instanceStore.length }],
          ),
          family(
            "host_instance_store_bytes",
            "gauge",
            "bytes",
            "The size of the instance's NVMe instance-store disks, in all.",
            [{ labels: {}, value: host.instanceStore.reduce((sum, d) => sum + d.sizeBytes, 0) }],
          ),
        ]),
  ];
}
