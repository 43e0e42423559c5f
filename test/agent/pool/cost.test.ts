/** The pool's cost math (src/agent/pool/cost.ts): pure. */
import t from "tap";
import { formatUsd, snapshotMonthlyCost, usd, volumeMonthlyCost, type Prices } from "../../../src/agent/pool/cost.ts";

const listPrices: Prices = {
  gibMonthUsd: 0.08,
  iopsMonthUsd: 0.005,
  throughputMonthUsd: 0.04,
  snapshotGibMonthUsd: 0.05,
};

t.test("gp3 at its free baseline costs its GiB only", async (t) => {
  const cost = volumeMonthlyCost({ sizeGiB: 100, volumeType: "gp3", iops: 3000, throughputMiBps: 125 }, listPrices);
  t.same([usd(cost.monthlyUsd), usd(cost.storageUsd), cost.iopsUsd, cost.throughputUsd], [8, 8, 0, 0]);
  t.equal(cost.note, undefined, "a full estimate carries no note");
});

t.test("gp3 with IOPS and throughput above the baseline pays for the extra only", async (t) => {
  // 100 GiB * 0.08 + (6000 - 3000) * 0.005 + (250 - 125) * 0.04 = 8 + 15 + 5
  const cost = volumeMonthlyCost({ sizeGiB: 100, volumeType: "gp3", iops: 6000, throughputMiBps: 250 }, listPrices);
  t.same([usd(cost.storageUsd), usd(cost.iopsUsd), usd(cost.throughputUsd), usd(cost.monthlyUsd)], [8, 15, 5, 28]);
  const iopsOnly = volumeMonthlyCost({ sizeGiB: 10, volumeType: "gp3", iops: 4000, throughputMiBps: 125 }, listPrices);
  t.equal(usd(iopsOnly.monthlyUsd), 5.8, "10 GiB and 1000 extra IOPS");
});

t.test("gp3 described without IOPS or throughput is at the baseline", async (t) => {
  t.equal(usd(volumeMonthlyCost({ sizeGiB: 50, volumeType: "gp3" }, listPrices).monthlyUsd), 4);
});

t.test("other types are priced by their GiB at the configured price, with a note", async (t) => {
  const gp2 = volumeMonthlyCost({ sizeGiB: 100, volumeType: "gp2", iops: 300 }, listPrices);
  t.equal(usd(gp2.monthlyUsd), 8, "gp2's IOPS come with its size: not charged");
  t.match(gp2.note, /^gp2: priced per GiB at cost\.gibMonthUsd only/);
  t.notMatch(gp2.note, /provisioned IOPS/);
  const io2 = volumeMonthlyCost({ sizeGiB: 100, volumeType: "io2", iops: 10000 }, listPrices);
  t.equal(usd(io2.monthlyUsd), 8, "io2's provisioned IOPS are not priced as gp3's");
  t.equal(io2.iopsUsd, 0);
  t.match(io2.note, /io2's own GiB price and provisioned IOPS not counted/);
  const unknown = volumeMonthlyCost({ sizeGiB: 1 }, listPrices);
  t.same([usd(unknown.monthlyUsd), unknown.note], [0.08, "type not reported: priced as gp3"]);
});

t.test("the configured prices are the ones used", async (t) => {
  const frankfurt: Prices = {
    gibMonthUsd: 0.0952,
    iopsMonthUsd: 0.006,
    throughputMonthUsd: 0.048,
    snapshotGibMonthUsd: 0.054,
  };
  t.equal(
    usd(volumeMonthlyCost({ sizeGiB: 100, volumeType: "gp3", iops: 3500, throughputMiBps: 150 }, frankfurt).monthlyUsd),
    13.72,
    "9.52 + 500 * 0.006 + 25 * 0.048",
  );
  t.equal(usd(snapshotMonthlyCost({ volumeSizeGiB: 100 }, frankfurt)), 5.4);
  const free = { ...listPrices, gibMonthUsd: 0 };
  t.equal(volumeMonthlyCost({ sizeGiB: 100, volumeType: "gp3" }, free).monthlyUsd, 0, "a zero price makes a zero cost");
});

t.test("snapshots at their volume size", async (t) => {
  t.equal(usd(snapshotMonthlyCost({ volumeSizeGiB: 20 }, listPrices)), 1);
});

t.test("rounding: whole cents, half up, and a sum rounded once", async (t) => {
  t.equal(usd(0.125), 0.13);
  t.equal(usd(1.005), 1.01, "no binary-fraction surprise at a half cent");
  t.equal(usd(0.004), 0);
  t.equal(formatUsd(3), "3.00");
  t.equal(formatUsd(1234.5), "1234.50");
  // Three 1 GiB volumes at 0.333…: each rounds to 0.33, the sum of the unrounded costs to 1.00.
  const third = { ...listPrices, gibMonthUsd: 1 / 3 };
  const each = volumeMonthlyCost({ sizeGiB: 1, volumeType: "gp3" }, third).monthlyUsd;
  t.equal(usd(each) * 3, 0.99);
  t.equal(usd(each * 3), 1);
});
