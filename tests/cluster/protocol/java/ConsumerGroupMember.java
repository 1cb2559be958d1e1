import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One member of a consumer group, of Kafka 4's consumer protocol (group.protocol=consumer) unless told otherwise: it
 * reads its topic, commits after every poll and before giving partitions up, and prints what it does, a line each:
 * "RECORD partition offset", "ASSIGNMENT p,p,..." whenever its partitions change, "CLOSED" once it left.
 * Arguments: bootstrap servers, topic, group id, a file whose existence tells it to leave the group and stop, and
 * optionally its group.protocol (consumer or classic).
 */
public class ConsumerGroupMember {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        Path stop = Paths.get(args[3]);
        String protocol = args.length > 4 ? args[4] : "consumer";
        Properties properties = new Properties();
        properties.put("bootstrap.servers", bootstrap);
        properties.put("group.id", group);
        properties.put("group.protocol", protocol);
        properties.put("enable.auto.commit", "false");
        properties.put("auto.offset.reset", "earliest");
        properties.put("key.deserializer", StringDeserializer.class.getName());
        properties.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(properties)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    consumer.commitSync();
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                }
            });
            String printed = null;
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    System.out.println("RECORD " + record.partition() + " " + record.offset());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                Set<Integer> numbers = new TreeSet<>();
                for (TopicPartition partition : consumer.assignment()) {
                    numbers.add(partition.partition());
                }
                List<String> names = new ArrayList<>();
                for (Integer number : numbers) {
                    names.add(number.toString());
                }
                String assignment = String.join(",", names);
                if (!assignment.equals(printed)) {
                    System.out.println("ASSIGNMENT " + assignment);
                    printed = assignment;
                }
            }
        }
        System.out.println("CLOSED");
    }
}
