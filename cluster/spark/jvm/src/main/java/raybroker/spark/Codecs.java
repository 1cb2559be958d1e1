package raybroker.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

/**
 * The records section of a compressed batch, decompressed into one reused buffer ({@link #length} bytes valid).
 * Codec ids and framing as Kafka's (and {@code storage.records.compression}): 1 gzip (RFC 1952), 2 snappy
 * (xerial's stream framing, or one raw block), 3 lz4 (LZ4 frame), 4 zstd (one frame). The libraries are those
 * Spark's own jars ship (snappy-java, lz4-java, zstd-jni).
 */
final class Codecs {
  /** A hostile batch must not make the reader allocate without bound: 1 GiB, Kafka's largest segment. */
  static final int MAX_OUTPUT_BYTES = 1 << 30;

  private byte[] output = new byte[1 << 20];
  int length;

  byte[] decompress(int codec, byte[] input, int at, int size, long baseOffset) {
    try (InputStream stream = open(codec, new ByteArrayInputStream(input, at, size), baseOffset)) {
      length = 0;
      while (true) {
        if (length == output.length) {
          if (output.length >= MAX_OUTPUT_BYTES) {
            throw RecordBatchDecoder.corrupt(
                "batch at offset " + baseOffset + " decompresses to more than " + MAX_OUTPUT_BYTES + " bytes", at);
          }
          byte[] grown = new byte[Math.min(MAX_OUTPUT_BYTES, output.length * 2)];
          System.arraycopy(output, 0, grown, 0, length);
          output = grown;
        }
        int read = stream.read(output, length, output.length - length);
        if (read < 0) {
          return output;
        }
        length += read;
      }
    } catch (IOException | RuntimeException e) {
      if (e instanceof IllegalStateException) {
        throw (IllegalStateException) e;
      }
      throw RecordBatchDecoder.corrupt(
          "batch at offset " + baseOffset + " does not decompress with codec " + codec + ": " + e, at);
    }
  }

  private static InputStream open(int codec, InputStream raw, long baseOffset) throws IOException {
    switch (codec) {
      case 1:
        return new GZIPInputStream(raw, 64 * 1024);
      case 2:
        return new SnappyInputStream(raw);
      case 3:
        return new LZ4FrameInputStream(raw);
      case 4:
        return new ZstdInputStreamNoFinalizer(raw);
      default:
        throw RecordBatchDecoder.corrupt("batch at offset " + baseOffset + " has unknown codec " + codec, 0);
    }
  }
}
