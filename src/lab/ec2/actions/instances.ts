/** DescribeInstances: a registered instance in a reservation of its own, a launched batch in one together. */
import { applyFilters, type FilterFields } from "../filters.ts";
import { OWNER_ID } from "../ids.ts";
import { INSTANCE_STATE_CODE, type InstanceRecord } from "../model.ts";
import { paginate } from "../pagination.ts";
import { renderInstance } from "../render.ts";
import { pickByIds, type ActionContext, type ActionHandler } from "./context.ts";

function attachedTo(ctx: ActionContext, instanceId: string) {
  return ctx.store.volumes().filter((v) => v.attachment?.instanceId === instanceId);
}

const INSTANCE_FILTERS = (ctx: ActionContext): FilterFields<InstanceRecord> => ({
  "instance-id": (i) => [i.instanceId],
  "availability-zone": (i) => [i.availabilityZone],
  "instance-state-name": (i) => [i.state],
  "instance-state-code": (i) => [INSTANCE_STATE_CODE[i.state]],
  "reservation-id": (i) => [i.reservationId],
  "owner-id": () => [OWNER_ID],
  "block-device-mapping.volume-id": (i) => attachedTo(ctx, i.instanceId).map((v) => v.volumeId),
  "block-device-mapping.device-name": (i) => attachedTo(ctx, i.instanceId).map((v) => v.attachment?.device),
  "block-device-mapping.status": (i) => attachedTo(ctx, i.instanceId).map((v) => v.attachment?.state),
});

export const describeInstances: ActionHandler = (ctx, params) => {
  const ids = params.list("InstanceId");
  const limits = { min: 5, max: 1000, idsParam: "InstanceId", idsName: "instancesSet" };
  paginate([], params, limits);
  const selected =
    ids.length > 0
      ? pickByIds(
          ids,
          (id) => ctx.store.instance(id),
          () => undefined,
          "InvalidInstanceID.NotFound",
          "instance ID",
        )
      : ctx.store.instances();
  const page = paginate(
    applyFilters(selected, params.filters(), INSTANCE_FILTERS(ctx), (i) => i.tags),
    params,
    limits,
  );
  // A batch's instances share their reservation (RunInstances), as EC2 lists them.
  const reservations = new Map<string, InstanceRecord[]>();
  for (const i of page.items) reservations.set(i.reservationId, [...(reservations.get(i.reservationId) ?? []), i]);
  return {
    reservationSet: [...reservations].map(([reservationId, members]) => ({
      reservationId,
      ownerId: OWNER_ID,
      groupSet: [],
      instancesSet: members.map((i) =>
        renderInstance(
          i,
          attachedTo(ctx, i.instanceId),
          ctx.store.networkInterfaces().filter((n) => n.instanceId === i.instanceId),
        ),
      ),
    })),
    nextToken: page.nextToken,
  };
};
