/**
 * The snapshot upload bench's `--sizes` (bench/snapshot-upload-sizes.ts), pure: a size whose
 * image would be smaller than a pool volume's smallest file system is refused before anything
 * is made, with the smallest size in the message.
 */
import t from "tap";
import { IMAGE_PER_SET, MIN_SET_MIB, parseSizes } from "../../bench/snapshot-upload-sizes.ts";

t.test("the default sizes, and the smallest: accepted", async (t) => {
  t.same(parseSizes("256,1024"), [256, 1024]);
  t.same(parseSizes(`${MIN_SET_MIB}`), [MIN_SET_MIB]);
  t.equal(MIN_SET_MIB * IMAGE_PER_SET, 1024, "the smallest image: 1 GiB, the smallest pool volume");
});

t.test("below the smallest, or no whole number: refused, naming what and the smallest", async (t) => {
  t.throws(() => parseSizes("64"), { message: /"64" is not a whole number of MiB from 256/ });
  t.throws(() => parseSizes("256,64,1024"), { message: /"64"/ });
  for (const text of ["", "abc", "300.5", "-512", "256,"])
    t.throws(() => parseSizes(text), { message: /is not a whole number of MiB from 256/ }, JSON.stringify(text));
});
