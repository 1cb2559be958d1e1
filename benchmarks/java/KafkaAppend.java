import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

import kafka.log.UnifiedLog;
import kafka.log.UnifiedLog$;
import kafka.server.BrokerTopicStats;
import kafka.server.RequestLocal;
import kafka.server.RequestLocal$;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.utils.Crc32C;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.common.MetadataVersion;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogOffsetsListener;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.VerificationGuard;

/**
 * Apache Kafka's own leader append, timed on the batches raybroker's {@code storage_append} appends: each batch goes
 * through {@code UnifiedLog.appendAsLeader} (the broker's produce path below the request handler: CRC check, every
 * record decoded by {@code LogValidator}, offsets assigned in place, the segment's {@code FileChannel} write, index
 * and producer-state upkeep), from a fresh log for every round. Beside it, in the same JVM and interleaved with it,
 * the JVM's floor for the same bytes: one {@code FileChannel.write} per batch plus one CRC-32C pass over what the
 * batch's CRC covers.
 *
 * <p>Arguments: the file of back-to-back batches, the batches a round appends (cycling through the file's), the
 * rounds (the first two warm the JIT and are not counted), a scratch folder. Prints one line of JSON: the best
 * round of each, in MB/s.
 */
public final class KafkaAppend {
    private static final int WARM_UP_ROUNDS = 2;
    /** Where a v2 batch holds its CRC, and where the bytes it covers start (Kafka's DefaultRecordBatch layout). */
    private static final int CRC_OFFSET = 17;
    private static final int ATTRIBUTES_OFFSET = 21;
    /** A batch's length field counts the bytes after baseOffset and itself. */
    private static final int LENGTH_OFFSET = 8;
    private static final int LOG_OVERHEAD = 12;
    private static final double MB = 1_000_000.0;

    private KafkaAppend() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: KafkaAppend <batches file> <batches per round> <rounds> <scratch dir>");
            System.exit(2);
        }
        List<ByteBuffer> batches = readBatches(Path.of(args[0]));
        int perRound = Integer.parseInt(args[1]);
        int rounds = Integer.parseInt(args[2]);
        Path scratch = Files.createDirectories(Path.of(args[3]));
        long roundBytes = 0;
        for (int index = 0; index < perRound; index++) {
            roundBytes += batches.get(index % batches.size()).remaining();
        }
        KafkaScheduler scheduler = new KafkaScheduler(1);
        scheduler.startup();
        double bestAppend = 0;
        double bestFloor = 0;
        try {
            for (int round = 0; round < WARM_UP_ROUNDS + rounds; round++) {
                double append = roundBytes / appendRound(batches, perRound, scratch.resolve("log-" + round + "-0"), scheduler) / MB;
                double floor = roundBytes / floorRound(batches, perRound, scratch.resolve("raw-" + round)) / MB;
                if (round >= WARM_UP_ROUNDS) {
                    bestAppend = Math.max(bestAppend, append);
                    bestFloor = Math.max(bestFloor, floor);
                }
            }
        } finally {
            scheduler.shutdown();
        }
        System.out.printf("{\"append_mb_s\": %.1f, \"write_crc_mb_s\": %.1f}%n", bestAppend, bestFloor);
    }

    /** The batches of the file, each a read-only view of its own bytes. */
    private static List<ByteBuffer> readBatches(Path file) throws IOException {
        List<ByteBuffer> batches = new ArrayList<>();
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(Files.readAllBytes(file)));
        ByteBuffer all = records.buffer();
        int position = 0;
        while (position < all.limit()) {
            int size = all.getInt(position + LENGTH_OFFSET) + LOG_OVERHEAD;
            ByteBuffer batch = all.duplicate();
            batch.position(position).limit(position + size);
            batches.add(batch.slice());
            position += size;
        }
        return batches;
    }

    /** Seconds to append the round's batches to a new log in `dir` as its leader, as a producer's would be. */
    private static double appendRound(List<ByteBuffer> batches, int perRound, Path dir, KafkaScheduler scheduler)
            throws IOException {
        Files.createDirectories(dir);
        UnifiedLog log = UnifiedLog$.MODULE$.apply(
                dir.toFile(),
                new LogConfig(new Properties()),
                0L,
                0L,
                scheduler,
                new BrokerTopicStats(false),
                Time.SYSTEM,
                900_000,
                new ProducerStateManagerConfig(86_400_000, false),
                600_000,
                new LogDirFailureChannel(1),
                true,
                scala.Option.empty(),
                true,
                new ConcurrentHashMap<>(),
                false,
                LogOffsetsListener.NO_OP_OFFSETS_LISTENER);
        RequestLocal requestLocal = RequestLocal$.MODULE$.withThreadConfinedCaching();
        MetadataVersion version = MetadataVersion.latestProduction();
        long start = System.nanoTime();
        for (int index = 0; index < perRound; index++) {
            ByteBuffer batch = batches.get(index % batches.size()).duplicate();
            // The append assigns offsets in place; a producer's batch starts at offset 0 (not under the CRC).
            batch.putLong(0, 0L);
            MemoryRecords records = MemoryRecords.readableRecords(batch);
            log.appendAsLeader(records, 0, AppendOrigin.CLIENT, version, requestLocal, VerificationGuard.SENTINEL);
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        log.close();
        delete(dir);
        return elapsed;
    }

    /** Seconds to check each batch's CRC-32C and write it with one `FileChannel.write`. */
    private static double floorRound(List<ByteBuffer> batches, int perRound, Path file) throws IOException {
        long elapsed;
        try (RandomAccessFile raw = new RandomAccessFile(file.toFile(), "rw"); FileChannel channel = raw.getChannel()) {
            long start = System.nanoTime();
            for (int index = 0; index < perRound; index++) {
                ByteBuffer batch = batches.get(index % batches.size()).duplicate();
                long expected = Integer.toUnsignedLong(batch.getInt(CRC_OFFSET));
                long crc = Crc32C.compute(batch, ATTRIBUTES_OFFSET,
                        batch.remaining() - ATTRIBUTES_OFFSET);
                if (crc != expected) {
                    throw new IllegalStateException("a benchmark batch has a wrong CRC");
                }
                while (batch.hasRemaining()) {
                    channel.write(batch);
                }
            }
            elapsed = System.nanoTime() - start;
        }
        Files.delete(file);
        return elapsed / 1e9;
    }

    private static void delete(Path dir) throws IOException {
        try (Stream<Path> paths = Files.walk(dir)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        }
    }
}
