package raybroker.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One Spark task's reader: walks its ranges' slices batch by batch ({@link RecordBatchDecoder}) and hands Spark
 * columnar batches of about {@code batchRows} rows (a Kafka batch is never split, so a batch may hold more).
 *
 * <p>Slices are read in chunks of {@link #CHUNK_BYTES} into one reused buffer: with the 16 KiB batches producers
 * write, a read per batch would be ~60k system calls per 1M records.
 */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
  static final int CHUNK_BYTES = 8 * 1024 * 1024;

  private final ReadPlan.Task task;
  private final RecordBatchDecoder decoder;
  private final WritableColumnVector[] vectors;
  private final ColumnarBatch batch;
  private final int batchRows;
  private int rangeIndex = -1;
  private int sliceIndex;
  private FileChannel channel;
  private byte[] buffer = new byte[0];
  private long bufferPosition;
  private int bufferLength;
  private long slicePosition;
  private long sliceEnd;
  /** Whether a slice of the current range was found rewritten by compaction (see {@link #openSlice}). */
  private boolean rangeRewritten;

  SegmentReader(ReadPlan.Task task, String[] columns, int batchRows) {
    this.task = task;
    this.batchRows = batchRows;
    StructType full = SegmentSource.schema(true);
    vectors = new WritableColumnVector[columns.length];
    for (int i = 0; i < columns.length; i++) {
      StructField field = full.apply(columns[i]);
      vectors[i] = new OnHeapColumnVector(batchRows, field.dataType());
    }
    decoder = new RecordBatchDecoder(columns, vectors);
    batch = new ColumnarBatch(vectors.clone());
  }

  @Override
  public boolean next() throws IOException {
    for (WritableColumnVector vector : vectors) {
      vector.reset();
    }
    decoder.rows = 0;
    while (decoder.rows < batchRows) {
      if (!nextKafkaBatch()) {
        break;
      }
    }
    batch.setNumRows(decoder.rows);
    return decoder.rows > 0;
  }

  /** Decodes the next Kafka batch of the task into the vectors; false when the task has no more. */
  private boolean nextKafkaBatch() throws IOException {
    while (true) {
      if (channel != null && slicePosition < sliceEnd) {
        int headerBytes = RecordBatchDecoder.LOG_OVERHEAD;
        ensure(slicePosition, (int) Math.min(headerBytes, sliceEnd - slicePosition));
        int at = (int) (slicePosition - bufferPosition);
        int size = RecordBatchDecoder.entrySize(buffer, at, (int) (sliceEnd - slicePosition), slicePosition);
        ensure(slicePosition, size);
        at = (int) (slicePosition - bufferPosition);
        slicePosition += size;
        decoder.decode(buffer, at, size);
        return true;
      }
      if (!nextSlice()) {
        return false;
      }
    }
  }

  private boolean nextSlice() throws IOException {
    closeChannel();
    while (true) {
      if (rangeIndex >= task.ranges.size()) {
        return false;
      }
      if (rangeIndex >= 0 && sliceIndex < task.ranges.get(rangeIndex).slices.size()) {
        ReadPlan.Slice slice = task.ranges.get(rangeIndex).slices.get(sliceIndex++);
        if (openSlice(task.ranges.get(rangeIndex), slice)) {
          return true;
        }
        continue;
      }
      if (++rangeIndex >= task.ranges.size()) {
        return false;
      }
      sliceIndex = 0;
      rangeRewritten = false;
      decoder.startRange(task.ranges.get(rangeIndex));
    }
  }

  /**
   * Opens the slice's file for reading: the located bytes while the file is the one located (same device and
   * inode; segment files are append-only below their size). Compaction may have rewritten the segment since (its
   * cleaned copy renamed over it: another inode) and merged the following segments of a group into it (their
   * files deleted): a rewritten file is read whole, its records filtered by the range's offsets as any are, and a
   * missing file after one is skipped, its records being in the rewritten one. A missing file otherwise is skipped
   * when the plan says so ({@link ReadPlan.Range#failOnMissing}), else (retention deleted the segment after the
   * read was planned) fails the task with a typed error. False when the slice is skipped.
   */
  private boolean openSlice(ReadPlan.Range range, ReadPlan.Slice slice) throws IOException {
    Path path = Paths.get(slice.path);
    FileChannel opened;
    long[] before;
    try {
      before = identity(path);
      opened = FileChannel.open(path, StandardOpenOption.READ);
    } catch (NoSuchFileException e) {
      if (rangeRewritten || !range.failOnMissing) {
        return false;
      }
      throw new IllegalStateException(
          "\nstorage.errors.OffsetOutOfRangeError: "
              + range.topic
              + "-"
              + range.partition
              + ": segment "
              + slice.path
              + " was deleted (retention or DeleteRecords) after this read was planned; some data was lost."
              + " Plan the read again.");
    }
    try {
      long[] after = identity(path);
      if (before[0] != after[0] || before[1] != after[1]) {
        throw new IllegalStateException(
            "\nstorage.errors.OffsetOutOfRangeError: segment " + slice.path + " was replaced while it was opened");
      }
      if (after[0] == slice.device && after[1] == slice.inode) {
        slicePosition = slice.position;
        sliceEnd = slice.position + slice.length;
      } else {
        rangeRewritten = true;
        slicePosition = 0;
        sliceEnd = opened.size();
      }
    } catch (IOException | RuntimeException e) {
      opened.close();
      throw e;
    }
    channel = opened;
    bufferLength = 0;
    bufferPosition = slicePosition;
    return true;
  }

  private static long[] identity(Path path) throws IOException {
    return new long[] {
      ((Number) Files.getAttribute(path, "unix:dev")).longValue(),
      ((Number) Files.getAttribute(path, "unix:ino")).longValue()
    };
  }

  /** Makes the buffer hold the file's bytes [position, position + size). */
  private void ensure(long position, int size) throws IOException {
    if (position >= bufferPosition && position + size <= bufferPosition + bufferLength) {
      return;
    }
    int want = (int) Math.min(Math.max(size, CHUNK_BYTES), sliceEnd - position);
    if (buffer.length < want) {
      buffer = new byte[Math.max(want, Math.min(CHUNK_BYTES, (int) (sliceEnd - position)))];
    }
    ByteBuffer target = ByteBuffer.wrap(buffer, 0, want);
    long at = position;
    while (target.hasRemaining()) {
      int read = channel.read(target, at);
      if (read < 0) {
        throw RecordBatchDecoder.corrupt(
            "segment file ends at " + at + " inside a located slice that ends at " + sliceEnd, position);
      }
      at += read;
    }
    bufferPosition = position;
    bufferLength = want;
  }

  private void closeChannel() throws IOException {
    if (channel != null) {
      channel.close();
      channel = null;
    }
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    closeChannel();
    batch.close();
  }
}
