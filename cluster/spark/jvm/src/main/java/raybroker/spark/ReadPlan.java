package raybroker.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * A planned read as the driver hands it over, one line per item, fields separated by tabs:
 *
 * <pre>
 *   read   include_headers(0|1) batch_rows
 *   task   task_number
 *   range  topic partition start_offset end_offset missing(fail|skip)
 *   slice  path position length device inode
 *   abort  producer_id first_offset
 * </pre>
 *
 * A {@code range} belongs to the last {@code task} above it; {@code slice}s (in offset order) and {@code abort}s
 * (aborted transactions of a read_committed read; none at read_uncommitted) to the last {@code range}. Topic
 * names (Kafka's [a-zA-Z0-9._-]) and paths hold no tab or newline (the driver checks). {@code missing} says
 * whether a located segment found deleted at read time fails the task ({@code fail}: records were lost) or is
 * skipped ({@code skip}: the read skips lost records, or the topic compacts, which deletes segments it merged). Malformed text raises
 * {@link IllegalArgumentException}.
 */
final class ReadPlan {
  final boolean includeHeaders;
  final int batchRows;
  final List<Task> tasks = new ArrayList<>();

  private ReadPlan(boolean includeHeaders, int batchRows) {
    this.includeHeaders = includeHeaders;
    this.batchRows = batchRows;
  }

  /** One Spark task: its ranges, read in order. */
  static final class Task implements InputPartition, Serializable {
    private static final long serialVersionUID = 1L;
    final List<Range> ranges = new ArrayList<>();
  }

  /** The offsets [start, end) of one partition and where their bytes lie. */
  static final class Range implements Serializable {
    private static final long serialVersionUID = 1L;
    final String topic;
    final int partition;
    final long start;
    final long end;
    final boolean failOnMissing;
    final List<Slice> slices = new ArrayList<>();
    final List<long[]> aborted = new ArrayList<>();

    Range(String topic, int partition, long start, long end, boolean failOnMissing) {
      this.topic = topic;
      this.partition = partition;
      this.start = start;
      this.end = end;
      this.failOnMissing = failOnMissing;
    }
  }

  /**
   * {@code length} bytes at {@code position} of the segment file at {@code path}, valid while that file is the
   * one located ({@code device}, {@code inode}): segment files are append-only below their size.
   */
  static final class Slice implements Serializable {
    private static final long serialVersionUID = 1L;
    final String path;
    final long position;
    final int length;
    final long device;
    final long inode;

    Slice(String path, long position, int length, long device, long inode) {
      this.path = path;
      this.position = position;
      this.length = length;
      this.device = device;
      this.inode = inode;
    }
  }

  static ReadPlan parse(String text) {
    if (text == null) {
      throw new IllegalArgumentException("option plan is missing");
    }
    ReadPlan plan = null;
    Task task = null;
    Range range = null;
    try {
      for (String line : text.split("\n")) {
        if (line.isEmpty()) {
          continue;
        }
        String[] f = line.split("\t", -1);
        switch (f[0]) {
          case "read":
            plan = new ReadPlan("1".equals(f[1]), Integer.parseInt(f[2]));
            break;
          case "task":
            task = new Task();
            plan.tasks.add(task);
            range = null;
            break;
          case "range":
            range =
                new Range(
                    f[1], Integer.parseInt(f[2]), Long.parseLong(f[3]), Long.parseLong(f[4]), "fail".equals(f[5]));
            task.ranges.add(range);
            break;
          case "slice":
            range.slices.add(
                new Slice(
                    f[1], Long.parseLong(f[2]), Integer.parseInt(f[3]), Long.parseLong(f[4]), Long.parseLong(f[5])));
            break;
          case "abort":
            range.aborted.add(new long[] {Long.parseLong(f[1]), Long.parseLong(f[2])});
            break;
          default:
            throw new IllegalArgumentException("unknown plan line " + f[0]);
        }
      }
    } catch (NullPointerException | IndexOutOfBoundsException | NumberFormatException e) {
      throw new IllegalArgumentException("malformed read plan: " + e, e);
    }
    if (plan == null || plan.batchRows <= 0) {
      throw new IllegalArgumentException("malformed read plan: no read line");
    }
    return plan;
  }
}
