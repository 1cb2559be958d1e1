package raybroker.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Spark DataSource V2 batch source over located Kafka segment bytes: {@code spark.read.format(
 * "raybroker.spark.SegmentSource").option("plan", text).load()}.
 *
 * <p>The plan (built by {@code cluster.spark.jvm_reading} on the driver, see {@link ReadPlan}) names, per Spark
 * task, the byte slices of {@code .log} files that hold each planned offset range, and the aborted transactions of
 * read_committed reads. Each task reads its slices on the executor and decodes the record batches
 * ({@link RecordBatchDecoder}) into columnar batches of Spark's Kafka-source schema; only the columns the query
 * uses are filled (column pruning).
 */
public final class SegmentSource implements TableProvider {
  /** Spark's Kafka-source schema; {@code headers} only when the plan asks for them. */
  static StructType schema(boolean includeHeaders) {
    StructType header =
        new StructType()
            .add("key", DataTypes.StringType)
            .add("value", DataTypes.BinaryType);
    StructType schema =
        new StructType()
            .add("key", DataTypes.BinaryType)
            .add("value", DataTypes.BinaryType)
            .add("topic", DataTypes.StringType)
            .add("partition", DataTypes.IntegerType)
            .add("offset", DataTypes.LongType)
            .add("timestamp", DataTypes.TimestampType)
            .add("timestampType", DataTypes.IntegerType);
    return includeHeaders ? schema.add("headers", DataTypes.createArrayType(header)) : schema;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(ReadPlan.parse(options.get("plan")).includeHeaders);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SegmentTable(ReadPlan.parse(properties.get("plan")));
  }

  @Override
  public boolean supportsExternalMetadata() {
    return false;
  }

  /** The table of one plan. */
  static final class SegmentTable implements Table, SupportsRead {
    private final ReadPlan plan;

    SegmentTable(ReadPlan plan) {
      this.plan = plan;
    }

    @Override
    public String name() {
      return "raybroker";
    }

    @Override
    public StructType schema() {
      return SegmentSource.schema(plan.includeHeaders);
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new SegmentScan(plan, schema());
    }
  }

  /** The scan: its builder, itself, and its batch (one object; nothing is pushed down but the columns). */
  static final class SegmentScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final ReadPlan plan;
    private StructType required;

    SegmentScan(ReadPlan plan, StructType full) {
      this.plan = plan;
      this.required = full;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return required;
    }

    @Override
    public String description() {
      return "raybroker segments (" + plan.tasks.size() + " tasks)";
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<InputPartition> partitions = new ArrayList<>(plan.tasks);
      return partitions.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      List<String> names = new ArrayList<>();
      for (StructField field : required.fields()) {
        names.add(field.name());
      }
      return new SegmentReaderFactory(names.toArray(new String[0]), plan.batchRows);
    }
  }
}
