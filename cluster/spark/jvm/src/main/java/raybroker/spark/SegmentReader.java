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
        channel = open(task.ranges.get(rangeIndex), slice);
        slicePosition = slice.position;
        sliceEnd = slice.position + slice.length;
        bufferLength = 0;
        bufferPosition = slicePosition;
        return true;
      }
      if (++rangeIndex >= task.ranges.size()) {
        return false;
      }
      sliceIndex = 0;
      decoder.startRange(task.ranges.get(rangeIndex));
    }
  }

  /**
   * The slice's file, if it is still the one located: a segment deleted by retention is missing, one swapped for
   * its compacted copy is another inode. Either fails the task with a typed error (the records planned are gone
   * or moved); a read planned again locates the segments as they are then.
   */
  private static FileChannel open(ReadPlan.Range range, ReadPlan.Slice slice) throws IOException {
    Path path = Paths.get(slice.path);
    FileChannel opened = null;
    try {
      opened = FileChannel.open(path, StandardOpenOption.READ);
      Object inode = Files.getAttribute(path, "unix:ino");
      Object device = Files.getAttribute(path, "unix:dev");
      if (((Number) inode).longValue() == slice.inode && ((Number) device).longValue() == slice.device) {
        FileChannel located = opened;
        opened = null;
        return located;
      }
    } catch (NoSuchFileException e) {
      // Deleted: reported below as for a replaced file.
    } finally {
      if (opened != null) {
        opened.close();
      }
    }
    throw new IllegalStateException(
        "\nstorage.errors.OffsetOutOfRangeError: "
            + range.topic
            + "-"
            + range.partition
            + ": segment "
            + slice.path
            + " was deleted or rewritten (retention, DeleteRecords or compaction) after this read was planned;"
            + " plan the read again");
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
