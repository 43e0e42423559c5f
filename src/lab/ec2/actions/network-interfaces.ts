/** DescribeNetworkInterfaces: the primary interfaces RunInstances made, with their tags. */
import { applyFilters, type FilterFields } from "../filters.ts";
import type { NetworkInterfaceRecord } from "../model.ts";
import { paginate } from "../pagination.ts";
import { renderNetworkInterface } from "../render.ts";
import { pickByIds, type ActionHandler } from "./context.ts";

const ENI_FILTERS: FilterFields<NetworkInterfaceRecord> = {
  "network-interface-id": (n) => [n.networkInterfaceId],
  "availability-zone": (n) => [n.availabilityZone],
  "attachment.instance-id": (n) => [n.instanceId],
  status: () => ["in-use"],
};

export const describeNetworkInterfaces: ActionHandler = (ctx, params) => {
  const ids = params.list("NetworkInterfaceId");
  const limits = { min: 5, max: 1000, idsParam: "NetworkInterfaceId", idsName: "networkInterfaceSet" };
  paginate([], params, limits);
  const selected =
    ids.length > 0
      ? pickByIds(
          ids,
          (id) => ctx.store.networkInterface(id),
          () => undefined,
          "InvalidNetworkInterfaceID.NotFound",
          "network interface",
        )
      : ctx.store.networkInterfaces();
  const page = paginate(
    applyFilters(selected, params.filters(), ENI_FILTERS, (n) => n.tags),
    params,
    limits,
  );
  return { networkInterfaceSet: page.items.map(renderNetworkInterface), nextToken: page.nextToken };
};
