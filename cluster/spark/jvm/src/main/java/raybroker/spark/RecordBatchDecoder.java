package raybroker.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32C;

import org.apache.spark.sql.execution.vectorized.WritableColumnVector;

/**
 * Kafka record batches (magic v2) -> rows of Spark's Kafka-source schema, appended to column vectors.
 *
 * <pre>
 * batch header (61 bytes, big-endian)           record (after the header, or after decompressing it)
 *   0  baseOffset            int64                length          varint (zigzag)
 *   8  batchLength           int32 (bytes after)  attributes      int8 (unused)
 *  12  partitionLeaderEpoch  int32                timestampDelta  varlong
 *  16  magic                 int8 (2)             offsetDelta     varint
 *  17  crc                   uint32 (CRC-32C of   keyLength       varint (-1: null key), key
 *                              bytes 21..end)     valueLength     varint (-1: null value), value
 *  21  attributes            int16                headerCount     varint, then per header:
 *  23  lastOffsetDelta       int32                  keyLength varint, key (UTF-8),
 *  27  baseTimestamp         int64                  valueLength varint (-1: null), value
 *  35  maxTimestamp          int64
 *  43  producerId            int64
 *  51  producerEpoch         int16
 *  53  baseSequence          int32
 *  57  recordCount           int32
 * </pre>
 *
 * Attributes: bits 0-2 the codec ({@link Codecs}), bit 3 LogAppendTime (every record then takes maxTimestamp),
 * bit 4 transactional, bit 5 control. The rules are those of the Python decoder
 * ({@code cluster.records.arrow_records}): only records with {@code start <= offset < end} of their range are
 * rows; control batches never are; at read_committed the data batches of aborted transactions are dropped by
 * Kafka's consumer rule ({@code storage.partition.aborted_batches}: before each batch of a producer, the listed
 * aborted transactions whose first offset is at or below the batch's last offset mark their producer aborted;
 * that producer's ABORT marker clears it); every batch's CRC is checked. Malformed bytes raise
 * {@link IllegalStateException} whose message has a line {@code storage.errors.CorruptRecordError: ...}, the way
 * the driver recognises raybroker's typed errors in a failed Spark job.
 */
final class RecordBatchDecoder {
  static final int LOG_OVERHEAD = 12;
  static final int HEADER_BYTES = 61;
  static final int MAGIC_V2 = 2;
  private static final int CODEC_MASK = 0x07;
  private static final int LOG_APPEND_TIME_MASK = 0x08;
  private static final int TRANSACTIONAL_MASK = 0x10;
  private static final int CONTROL_MASK = 0x20;
  private static final int CONTROL_KEY_BYTES = 4;
  private static final int CONTROL_ABORT = 0;
  private static final long MICROS_PER_MILLI = 1000L;

  private final WritableColumnVector key;
  private final WritableColumnVector value;
  private final WritableColumnVector topic;
  private final WritableColumnVector partition;
  private final WritableColumnVector offset;
  private final WritableColumnVector timestamp;
  private final WritableColumnVector timestampType;
  private final WritableColumnVector headers;
  private final CRC32C crc = new CRC32C();
  private final Codecs codecs = new Codecs();
  /** Rows appended since the vectors were last reset. */
  int rows;

  private ReadPlan.Range range;
  /**
   * One past the last offset of the range's latest decoded batch: a batch below it was decoded already (a segment
   * that compaction rewrote is read whole, and holds batches read before from the segments it replaced).
   */
  private long nextOffset;
  private byte[] topicBytes;
  private final ArrayDeque<long[]> pendingAborts = new ArrayDeque<>();
  private final Set<Long> abortedProducers = new HashSet<>();
  private byte[] data;
  private int pos;

  RecordBatchDecoder(String[] columns, WritableColumnVector[] vectors) {
    key = vector("key", columns, vectors);
    value = vector("value", columns, vectors);
    topic = vector("topic", columns, vectors);
    partition = vector("partition", columns, vectors);
    offset = vector("offset", columns, vectors);
    timestamp = vector("timestamp", columns, vectors);
    timestampType = vector("timestampType", columns, vectors);
    headers = vector("headers", columns, vectors);
  }

  private static WritableColumnVector vector(String name, String[] columns, WritableColumnVector[] vectors) {
    for (int i = 0; i < columns.length; i++) {
      if (columns[i].equals(name)) {
        return vectors[i];
      }
    }
    return null;
  }

  /** The following batches are those of {@code next}'s slices. */
  void startRange(ReadPlan.Range next) {
    range = next;
    nextOffset = Long.MIN_VALUE;
    topicBytes = next.topic.getBytes(StandardCharsets.UTF_8);
    List<long[]> aborted = new ArrayList<>(next.aborted);
    aborted.sort((a, b) -> Long.compare(a[1], b[1]));
    pendingAborts.clear();
    pendingAborts.addAll(aborted);
    abortedProducers.clear();
  }

  static IllegalStateException corrupt(String message, long position) {
    return new IllegalStateException(
        "\nstorage.errors.CorruptRecordError: " + message + " (at byte " + position + ")");
  }

  /** The bytes of the batch starting at {@code at} (log overhead included), checked against what is left. */
  static int entrySize(byte[] buffer, int at, int remaining, long filePosition) {
    if (remaining < HEADER_BYTES) {
      throw corrupt("a located slice ends " + remaining + " bytes into a batch header", filePosition);
    }
    int batchLength = readInt(buffer, at + 8);
    if (batchLength < HEADER_BYTES - LOG_OVERHEAD || batchLength > remaining - LOG_OVERHEAD) {
      throw corrupt("batch length " + batchLength + " does not fit the located slice", filePosition);
    }
    return batchLength + LOG_OVERHEAD;
  }

  /** Appends the rows of the batch of {@code size} bytes at {@code at}. */
  void decode(byte[] buffer, int at, int size) {
    long baseOffset = readLong(buffer, at);
    int magic = buffer[at + 16];
    if (magic != MAGIC_V2) {
      throw corrupt("batch at offset " + baseOffset + " has magic " + magic + "; this reader reads magic 2", at);
    }
    long storedCrc = readInt(buffer, at + 17) & 0xffffffffL;
    crc.reset();
    crc.update(buffer, at + 21, size - 21);
    if (crc.getValue() != storedCrc) {
      throw corrupt("batch at offset " + baseOffset + " fails its CRC", at);
    }
    int attributes = readShort(buffer, at + 21);
    long lastOffset = baseOffset + readInt(buffer, at + 23);
    long baseTimestamp = readLong(buffer, at + 27);
    long maxTimestamp = readLong(buffer, at + 35);
    long producerId = readLong(buffer, at + 43);
    int count = readInt(buffer, at + 57);
    boolean control = (attributes & CONTROL_MASK) != 0;
    if (lastOffset < nextOffset) {
      return;
    }
    nextOffset = lastOffset + 1;
    if (dropped(producerId, lastOffset, control, (attributes & TRANSACTIONAL_MASK) != 0)) {
      return;
    }
    if (control) {
      if (producerId >= 0 && controlType(buffer, at, size, baseOffset) == CONTROL_ABORT) {
        abortedProducers.remove(producerId);
      }
      return;
    }
    if (lastOffset < range.start || baseOffset >= range.end || count == 0) {
      return;
    }
    boolean logAppendTime = (attributes & LOG_APPEND_TIME_MASK) != 0;
    int end = openRecords(buffer, at, size, attributes, baseOffset);
    if (count < 0 || count > end - pos) {
      throw corrupt("batch at offset " + baseOffset + " claims " + count + " records", at);
    }
    for (int i = 0; i < count; i++) {
      record(baseOffset, logAppendTime ? maxTimestamp : baseTimestamp, logAppendTime, end);
    }
    if (pos != end) {
      throw corrupt("batch at offset " + baseOffset + " has " + (end - pos) + " bytes after its records", at);
    }
  }

  /**
   * Points {@code data} and {@code pos} at the first record of the batch of {@code size} bytes at {@code at}: in
   * {@code buffer} itself, or in the records decompressed by the codec its {@code attributes} name; returns the
   * position after the last record. Both the row decoder and the control-record reader start here.
   */
  private int openRecords(byte[] buffer, int at, int size, int attributes, long baseOffset) {
    int codec = attributes & CODEC_MASK;
    if (codec == 0) {
      data = buffer;
      pos = at + HEADER_BYTES;
      return at + size;
    }
    data = codecs.decompress(codec, buffer, at + HEADER_BYTES, size - HEADER_BYTES, baseOffset);
    pos = 0;
    return codecs.length;
  }

  /** Kafka's read_committed rule for one batch (see the class docstring); control batches are never dropped. */
  private boolean dropped(long producerId, long lastOffset, boolean control, boolean transactional) {
    if (producerId < 0) {
      return false;
    }
    while (!pendingAborts.isEmpty() && pendingAborts.peekFirst()[1] <= lastOffset) {
      abortedProducers.add(pendingAborts.pollFirst()[0]);
    }
    return !control && transactional && abortedProducers.contains(producerId);
  }

  private int controlType(byte[] buffer, int at, int size, long baseOffset) {
    int end = openRecords(buffer, at, size, readShort(buffer, at + 21), baseOffset);
    readVarint(end);
    pos++;
    readVarlong(end);
    readVarint(end);
    int keyLength = readVarint(end);
    if (keyLength < CONTROL_KEY_BYTES || keyLength > end - pos) {
      throw corrupt("control batch at offset " + baseOffset + " has no 4-byte key", at);
    }
    return readShort(data, pos + 2);
  }

  private void record(long baseOffset, long timestampBase, boolean logAppendTime, int end) {
    int length = readVarint(end);
    int recordEnd = pos + length;
    if (length < 0 || recordEnd > end) {
      throw corrupt("a record of the batch at offset " + baseOffset + " overruns it", pos);
    }
    pos++;
    long timestampDelta = readVarlong(recordEnd);
    long recordOffset = baseOffset + readVarint(recordEnd);
    int keyLength = readVarint(recordEnd);
    int keyAt = pos;
    skip(keyLength, recordEnd, baseOffset);
    int valueLength = readVarint(recordEnd);
    int valueAt = pos;
    skip(valueLength, recordEnd, baseOffset);
    boolean wanted = recordOffset >= range.start && recordOffset < range.end;
    if (wanted) {
      append(key, keyAt, keyLength);
      append(value, valueAt, valueLength);
      if (topic != null) {
        topic.appendByteArray(topicBytes, 0, topicBytes.length);
      }
      if (partition != null) {
        partition.appendInt(range.partition);
      }
      if (offset != null) {
        offset.appendLong(recordOffset);
      }
      if (timestamp != null) {
        long millis = logAppendTime ? timestampBase : timestampBase + timestampDelta;
        timestamp.appendLong(millis * MICROS_PER_MILLI);
      }
      if (timestampType != null) {
        timestampType.appendInt(logAppendTime ? 1 : 0);
      }
    }
    int headerCount = readVarint(recordEnd);
    if (headerCount < 0) {
      throw corrupt("a record of the batch at offset " + baseOffset + " has " + headerCount + " headers", pos);
    }
    boolean keepHeaders = wanted && headers != null;
    if (keepHeaders && headerCount == 0) {
      headers.appendNull();
    }
    if (keepHeaders && headerCount > 0) {
      headers.appendArray(headerCount);
    }
    WritableColumnVector entries = keepHeaders ? headers.arrayData() : null;
    for (int i = 0; i < headerCount; i++) {
      int nameLength = readVarint(recordEnd);
      int nameAt = pos;
      if (nameLength < 0) {
        throw corrupt("a header of the batch at offset " + baseOffset + " has no key", pos);
      }
      skip(nameLength, recordEnd, baseOffset);
      int dataLength = readVarint(recordEnd);
      int dataAt = pos;
      skip(dataLength, recordEnd, baseOffset);
      if (entries != null) {
        append(entries.getChild(0), nameAt, nameLength);
        append(entries.getChild(1), dataAt, dataLength);
        entries.appendStruct(false);
      }
    }
    if (pos != recordEnd) {
      throw corrupt("a record of the batch at offset " + baseOffset + " does not end where its length says", pos);
    }
    if (wanted) {
      rows++;
    }
  }

  private void append(WritableColumnVector vector, int at, int length) {
    if (vector == null) {
      return;
    }
    if (length < 0) {
      vector.appendNull();
    } else {
      vector.appendByteArray(data, at, length);
    }
  }

  private void skip(int length, int end, long baseOffset) {
    if (length < -1 || (length > 0 && length > end - pos)) {
      throw corrupt("a field of a record of the batch at offset " + baseOffset + " overruns it", pos);
    }
    if (length > 0) {
      pos += length;
    }
  }

  private int readVarint(int end) {
    int raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (pos >= end) {
        throw corrupt("a varint runs past its record", pos);
      }
      byte b = data[pos++];
      raw |= (b & 0x7f) << shift;
      if (b >= 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw corrupt("a varint is longer than 5 bytes", pos);
  }

  private long readVarlong(int end) {
    long raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= end) {
        throw corrupt("a varlong runs past its record", pos);
      }
      byte b = data[pos++];
      raw |= (long) (b & 0x7f) << shift;
      if (b >= 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw corrupt("a varlong is longer than 10 bytes", pos);
  }

  static int readShort(byte[] b, int at) {
    return (short) (((b[at] & 0xff) << 8) | (b[at + 1] & 0xff));
  }

  static int readInt(byte[] b, int at) {
    return ((b[at] & 0xff) << 24) | ((b[at + 1] & 0xff) << 16) | ((b[at + 2] & 0xff) << 8) | (b[at + 3] & 0xff);
  }

  static long readLong(byte[] b, int at) {
    return ((long) readInt(b, at) << 32) | (readInt(b, at + 4) & 0xffffffffL);
  }
}
