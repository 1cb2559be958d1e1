import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One member of a share group (KIP-932), Kafka 4.2's KafkaShareConsumer with explicit acknowledgement: it
 * acknowledges each record it gets by its value, RELEASE for a value starting with "release" delivered for the
 * first time and for one starting with "bounce" always, REJECT for one starting with "reject", ACCEPT otherwise,
 * commits after every poll, and prints a line each: "RECORD offset deliveryCount TYPE value", "CLOSED" once it
 * closed. A value starting with "hang" delivered for the first time is printed with type HOLD and never acknowledged:
 * the member stops there (holding it) until it is killed. Arguments: bootstrap servers, topic, group id, and a file
 * whose existence tells it to close.
 */
public class ShareGroupMember {
    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        Path stop = Paths.get(args[3]);
        Properties properties = new Properties();
        properties.put("bootstrap.servers", bootstrap);
        properties.put("group.id", group);
        properties.put("share.acknowledgement.mode", "explicit");
        properties.put("key.deserializer", StringDeserializer.class.getName());
        properties.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(properties)) {
            consumer.subscribe(List.of(topic));
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    short count = record.deliveryCount().orElse((short) -1);
                    if (record.value().startsWith("hang") && count == 1) {
                        System.out.println("RECORD " + record.offset() + " " + count + " HOLD " + record.value());
                        System.out.flush();
                        Thread.sleep(Long.MAX_VALUE);
                    }
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    if (record.value().startsWith("bounce")
                            || (record.value().startsWith("release") && count == 1)) {
                        type = AcknowledgeType.RELEASE;
                    } else if (record.value().startsWith("reject")) {
                        type = AcknowledgeType.REJECT;
                    }
                    consumer.acknowledge(record, type);
                    System.out.println("RECORD " + record.offset() + " " + count + " " + type.name() + " " + record.value());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                System.out.flush();
            }
        }
        System.out.println("CLOSED");
        System.out.flush();
    }
}
