package raybroker.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.HashSet;
import java.util.Set;

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
  private static final String LOG_SUFFIX = ".log";
  /** Digits of a segment file's base offset in its name (Kafka's zero-padded 20). */
  private static final int OFFSET_DIGITS = 20;
  /** Listings of a partition's directory when the file found keeps being deleted before it opens. */
  private static final int HOLDER_ATTEMPTS = 10;

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
  /** The files ("device:inode") read whole for the current range, found rewritten ({@link #openSlice}). */
  private final Set<String> readWhole = new HashSet<>();

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
      readWhole.clear();
      decoder.startRange(task.ranges.get(rangeIndex));
    }
  }

  /**
   * Opens the slice's file for reading: the located bytes while the file is the one located (same device and
   * inode; segment files are append-only below their size). Compaction may have rewritten the segment since (its
   * cleaned copy renamed over it: another inode) and merged following segments of a group into it (their files
   * deleted). A rewritten file is read whole, its batches filtered by the range's offsets and by those decoded
   * already ({@link RecordBatchDecoder}). A missing file's records, when compaction moved them, lie in the segment
   * file of the directory with the greatest base offset at or below the missing one's, which is read whole in the
   * same way: the group's first segment may have been empty when located (emptied by an earlier pass), so it is
   * not among the range's slices. A missing file fails the task with a typed error only when the plan says so
   * ({@link ReadPlan.Range#failOnMissing}: retention deleted the segment after the read was planned) and nothing
   * rewritten was met in the range. False when the slice is skipped.
   */
  private boolean openSlice(ReadPlan.Range range, ReadPlan.Slice slice) throws IOException {
    Path path = Paths.get(slice.path);
    Identified file = openIdentified(path);
    if (file == null) {
      if (range.failOnMissing && readWhole.isEmpty()) {
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
      return openHolder(path);
    }
    if (file.device == slice.device && file.inode == slice.inode) {
      slicePosition = slice.position;
      sliceEnd = slice.position + slice.length;
      use(file.channel);
      return true;
    }
    return useWhole(file);
  }

  /**
   * Opens, to read whole, the segment file that now holds the records of the deleted {@code missing} (see
   * {@link #openSlice}); false when there is none, or when it was read whole in this range already. The
   * directory is listed again when the file found is deleted before it opens (another compaction pass).
   */
  private boolean openHolder(Path missing) throws IOException {
    long missingBase = baseOffset(missing);
    for (int attempt = 0; attempt < HOLDER_ATTEMPTS; attempt++) {
      Path holder = null;
      long holderBase = -1;
      try (DirectoryStream<Path> files = Files.newDirectoryStream(missing.getParent(), "*" + LOG_SUFFIX)) {
        for (Path file : files) {
          long base = baseOffset(file);
          if (base >= 0 && base <= missingBase && base > holderBase) {
            holder = file;
            holderBase = base;
          }
        }
      } catch (NoSuchFileException e) {
        return false;
      }
      if (holder == null) {
        return false;
      }
      Identified file = openIdentified(holder);
      if (file != null) {
        return useWhole(file);
      }
    }
    throw new IllegalStateException(
        "\nstorage.errors.OffsetOutOfRangeError: the segment files of "
            + missing.getParent()
            + " kept changing while "
            + missing.getFileName()
            + " was looked for; plan the read again");
  }

  /** An opened segment file and its identity (device and inode) when it was opened. */
  private static final class Identified {
    final FileChannel channel;
    final long device;
    final long inode;

    Identified(FileChannel channel, long device, long inode) {
      this.channel = channel;
      this.device = device;
      this.inode = inode;
    }
  }

  /**
   * Opens {@code path} with its identity; null when there is no such file. Fails when the file at {@code path}
   * was replaced between taking its identity and opening it.
   */
  private static Identified openIdentified(Path path) throws IOException {
    long[] before;
    FileChannel opened;
    try {
      before = identity(path);
      opened = FileChannel.open(path, StandardOpenOption.READ);
    } catch (NoSuchFileException e) {
      return null;
    }
    try {
      long[] after = identity(path);
      if (before[0] != after[0] || before[1] != after[1]) {
        throw new IllegalStateException(
            "\nstorage.errors.OffsetOutOfRangeError: segment " + path + " was replaced while it was opened");
      }
    } catch (IOException | RuntimeException e) {
      opened.close();
      throw e;
    }
    return new Identified(opened, before[0], before[1]);
  }

  /** Reads {@code file} whole, unless it was read whole in this range already (then closes it: false). */
  private boolean useWhole(Identified file) throws IOException {
    if (!readWhole.add(file.device + ":" + file.inode)) {
      file.channel.close();
      return false;
    }
    try {
      sliceEnd = file.channel.size();
    } catch (IOException e) {
      file.channel.close();
      throw e;
    }
    slicePosition = 0;
    use(file.channel);
    return true;
  }

  /** The base offset a segment file's name gives ({@code 00000000000000000042.log}: 42); -1 for other names. */
  private static long baseOffset(Path file) {
    String name = file.getFileName().toString();
    int digits = name.length() - LOG_SUFFIX.length();
    if (digits != OFFSET_DIGITS || !name.endsWith(LOG_SUFFIX)) {
      return -1;
    }
    for (int i = 0; i < digits; i++) {
      if (!Character.isDigit(name.charAt(i))) {
        return -1;
      }
    }
    return Long.parseLong(name.substring(0, digits));
  }

  private void use(FileChannel opened) {
    channel = opened;
    bufferLength = 0;
    bufferPosition = slicePosition;
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
